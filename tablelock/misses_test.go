package tablelock

import (
	"fmt"
	"testing"
	"time"
)

// A Locker's record of its missed attempts keeps what a hand-off needs
// (window), and forgets the names missed longer than waitedWindow ago
// when it sweeps, once it has grown.
func TestMissesForgotten(t *testing.T) {
	m := &mysql{}
	if got := m.window("a"); got != waitedWindow {
		t.Errorf("window of a name never missed: %v, want %v", got, waitedWindow)
	}
	m.missed("a")
	if got := m.window("a"); got >= waitedWindow {
		t.Errorf("window just after a miss: %v, want under %v", got, waitedWindow)
	}
	for i := range 10 * missesKept {
		m.missed(fmt.Sprint(i))
	}
	if n := len(m.misses); n != 10*missesKept+1 {
		t.Fatalf("%d names kept, all missed just now, want %d", n, 10*missesKept+1)
	}
	for n := range m.misses { // as if all were missed long ago
		m.misses[n] = time.Now().Add(-2 * waitedWindow)
	}
	fresh := m.sweepAt - len(m.misses) + 1 // the last of them sweeps
	for i := range fresh {
		m.missed(fmt.Sprint("new", i))
	}
	if n := len(m.misses); n != fresh {
		t.Errorf("%d names kept after a sweep, want the %d missed since: old misses are not forgotten", n, fresh)
	}
	if got := m.window("a"); got != waitedWindow {
		t.Errorf("window of a name forgotten: %v, want %v", got, waitedWindow)
	}
}
