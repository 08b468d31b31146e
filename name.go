package dlock

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameLen is the longest lock name, in bytes, that every backend accepts.
const MaxNameLen = 255

// ValidateName reports whether name is a lock name every backend accepts:
// non-empty valid UTF-8 of at most MaxNameLen bytes without NUL. The error
// wraps ErrInvalidName.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidName)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: contains NUL", ErrInvalidName)
	}
	return nil
}
