package dlock_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dlockhq/dlock"
)

// FuzzValidateName: ValidateName never panics, and accepts exactly the
// names its documentation promises every backend accepts.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"", "a", "orders/42", "ü", "\x00", "\xff", strings.Repeat("x", dlock.MaxNameLen+1)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := dlock.ValidateName(name)
		want := name != "" && len(name) <= dlock.MaxNameLen && utf8.ValidString(name) && !strings.ContainsRune(name, 0)
		if (err == nil) != want {
			t.Fatalf("ValidateName(%q) = %v, want accepted=%v", name, err, want)
		}
		if err != nil && !errors.Is(err, dlock.ErrInvalidName) {
			t.Fatalf("ValidateName(%q) = %v, not ErrInvalidName", name, err)
		}
	})
}
