package redislock

import (
	"strings"
	"testing"
)

// FuzzKeys: a name becomes the whole hash tag of its keys (so all of one
// lock's keys share a cluster slot), and distinct names distinct keys.
func FuzzKeys(f *testing.F) {
	for _, s := range []string{"a", "{a}", "a}b", "%7B", "}{", "orders:42", "ü"} {
		f.Add(s, s+"}")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := keysFor(a), keysFor(b)
		for _, k := range []string{ka.lock(), ka.fence(), ka.channel(), ka.lockWaiters(), ka.queue(), ka.timeouts(), ka.waiters(), ka.waiterPrefix()} {
			open := strings.IndexByte(k, '{')
			closing := strings.IndexByte(k[open+1:], '}')
			if open < 0 || closing < 0 || k[:open+1+closing+1] != ka.lock() {
				t.Fatalf("key %q of %q does not carry the lock's hash tag %q", k, a, ka.lock())
			}
		}
		if a != b && ka.lock() == kb.lock() {
			t.Fatalf("names %q and %q share the key %q", a, b, ka.lock())
		}
	})
}
