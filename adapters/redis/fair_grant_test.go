package redislock

import (
	"fmt"
	"testing"
	"time"
)

// A published grant is taken only for an attempt the waiter still
// knows; the owner's text is everything after the numbers.
func TestFairWaitGrant(t *testing.T) {
	n := &notifier{}
	w := n.fairWait("label with spaces#01")
	first := w.attempt()
	second := w.attempt()
	w.missed(second) // the server saw the second: a grant names it or a later one
	n.deliverGrant(fmt.Sprintf("g %d 7 100 label with spaces#01", first))
	if _, ok := w.take(); ok {
		t.Fatalf("a grant naming attempt %d, superseded, was taken", first)
	}
	n.deliverGrant(fmt.Sprintf("g %d 8 100 someone else", second))
	n.deliverGrant(fmt.Sprintf("g %d x 100 label with spaces#01", second))
	if _, ok := w.take(); ok {
		t.Fatal("a grant for another owner, or malformed, was taken")
	}
	n.deliverGrant(fmt.Sprintf("g %d 9 100 label with spaces#01", second))
	g, ok := w.take()
	if !ok || g.Token != 9 || g.Term != 100*time.Millisecond || g.Since.IsZero() {
		t.Fatalf("grant for attempt %d: %+v, %v", second, g, ok)
	}

	// A later wait of the same owner (its grant was lost, and it waits
	// again) takes no grant published late for the earlier one.
	n.grants.Delete("label with spaces#01")
	again := n.fairWait("label with spaces#01")
	again.attempt()
	n.deliverGrant(fmt.Sprintf("g %d 10 100 label with spaces#01", second))
	if _, ok := again.take(); ok {
		t.Fatal("a later wait took a grant published for an earlier one")
	}
}
