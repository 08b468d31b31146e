// Package errjoin joins errors on one line. errors.Join puts each error on
// a line of its own, which breaks log lines and hides the sentence each
// error starts; Join keeps errors.Is and errors.As on every part and
// writes them as one sentence, separated by "; ".
package errjoin

import "strings"

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
