package zklock

import (
	"net/url"
	"strings"
	"testing"
)

// FuzzEscape: a lock name becomes one valid node name, and distinct names
// distinct node names (escape is reversible).
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"a", "orders/42", "..", ".", "zookeeper", "%41", "A", "ü", "a b", "_c_x-lock-0000000001"} {
		f.Add(s, strings.ToUpper(s))
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ea, eb := escape(a), escape(b)
		if strings.Trim(ea, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-%") != "" {
			t.Fatalf("escape(%q) = %q has characters outside [A-Za-z0-9_%%-]", a, ea)
		}
		if back, err := url.PathUnescape(ea); err != nil || back != a {
			t.Fatalf("escape(%q) = %q does not decode back (%q, %v)", a, ea, back, err)
		}
		if a != b && ea == eb {
			t.Fatalf("names %q and %q share the node name %q", a, b, ea)
		}
	})
}
