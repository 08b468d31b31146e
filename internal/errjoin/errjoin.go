// Package errjoin joins errors on one line. errors.Join puts each error on
// a line of its own, which breaks log lines and hides the sentence each
// error starts; Join keeps errors.Is and errors.As on every part and
// writes them as one sentence, separated by "; ".
package errjoin

import (
	"slices"
	"strings"
)

type joined []error

func (j joined) Error() string {
	parts := make([]string, len(j))
	for i, err := range j {
		parts[i] = err.Error()
	}
	return strings.Join(parts, "; ")
}

func (j joined) Unwrap() []error { return j }

// Join returns an error wrapping the non-nil errs, or nil when there are
// none; a single error is returned as it is.
func Join(errs ...error) error {
	var j joined
	for _, err := range errs {
		if err != nil {
			j = append(j, err)
		}
	}
	switch len(j) {
	case 0:
		return nil
	case 1:
		return j[0]
	}
	return j
}

// OneLine returns err with its text on one line: a driver error that
// spans lines (pgx's, when it tried several addresses) breaks log lines
// as errors.Join does. Each line break and the indentation after it
// become "; ". errors.Is and errors.As still see err. nil stays nil, and
// an error with no line break is returned as it is.
func OneLine(err error) error {
	if err == nil || !strings.Contains(err.Error(), "\n") {
		return err
	}
	return oneLine{err}
}

type oneLine struct{ err error }

func (o oneLine) Error() string {
	lines := strings.Split(o.err.Error(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSpace(l)
	}
	return strings.Join(slices.DeleteFunc(lines, func(l string) bool { return l == "" }), "; ")
}

func (o oneLine) Unwrap() error { return o.err }
