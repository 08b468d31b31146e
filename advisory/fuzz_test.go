package advisory_test

import (
	"strings"
	"testing"

	"github.com/dlockhq/dlock/advisory"
)

// FuzzNames: MySQL lock names fit GET_LOCK's 64 characters, and distinct
// names stay distinct under MySQL's case-insensitive comparison; distinct
// names get distinct PostgreSQL keys (a failure here would be a 64-bit
// FNV-1a collision, which the package documents as possible).
func FuzzNames(f *testing.F) {
	for _, s := range []string{"a", "A", "orders:42", "dl:x", "dl#00", strings.Repeat("a", 60), strings.Repeat("a", 61), "ü", "Ü"} {
		f.Add(s, strings.ToUpper(s))
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ma, mb := advisory.MySQLName(a), advisory.MySQLName(b)
		if len(ma) > 64 {
			t.Fatalf("MySQLName(%q) = %q is longer than 64", a, ma)
		}
		if a != b && strings.EqualFold(ma, mb) {
			t.Fatalf("names %q and %q share the MySQL lock %q / %q", a, b, ma, mb)
		}
		if a != b && advisory.PostgresKey(a) == advisory.PostgresKey(b) {
			t.Fatalf("names %q and %q share the PostgreSQL key %d", a, b, advisory.PostgresKey(a))
		}
	})
}
