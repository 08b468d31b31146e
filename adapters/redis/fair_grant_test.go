package redislock

import (
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
	n.deliverGrant("g 1 7 100 label with spaces#01")
	if _, ok := w.take(); ok {
		t.Fatalf("a grant naming attempt %d, superseded, was taken", first)
	}
	n.deliverGrant("g 2 8 100 someone else")
	n.deliverGrant("g 2 x 100 label with spaces#01")
	if _, ok := w.take(); ok {
		t.Fatal("a grant for another owner, or malformed, was taken")
	}
	n.deliverGrant("g 2 9 100 label with spaces#01")
	g, ok := w.take()
	if !ok || g.Token != 9 || g.Term != 100*time.Millisecond || g.Since.IsZero() {
		t.Fatalf("grant for attempt %d: %+v, %v", second, g, ok)
	}
}
