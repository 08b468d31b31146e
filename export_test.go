package dlock

import "sync/atomic"

// LocalWaiting reports how many call chains wait in c's queue for name,
// for tests that must know a Lock is queued before they go on.
func LocalWaiting(c *Client, name string) int {
	if st := c.state(name); st != nil {
		return st.waitingCount()
	}
	return 0
}

// LocallyHeld reports whether c has a hold of name, for tests that must know
// a release in the background has settled before they go on.
func LocallyHeld(c *Client, name string) bool {
	st := c.state(name)
	return st != nil && st.hasHold()
}

// CountWorkers makes c count the worker goroutines it starts from now on,
// for tests that must know whether calls ran on their callers'
// goroutines. Call it before c is used.
func CountWorkers(c *Client) *atomic.Int32 {
	n := new(atomic.Int32)
	w := c.caller.workers
	spawn := w.spawn
	w.spawn = func(f func()) {
		n.Add(1)
		spawn(f)
	}
	return n
}
