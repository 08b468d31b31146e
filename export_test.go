package dlock

import "sync/atomic"

// LocalWaiting reports how many call chains wait in c's queue for name,
// for tests that must know a Lock is queued before they go on.
func LocalWaiting(c *Client, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[name]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// LocallyHeld reports whether c has a hold of name, for tests that must know
// a release in the background has settled before they go on.
func LocallyHeld(c *Client, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holds[name] != nil
}

// CountWorkers makes c count the worker goroutines it starts from now on,
// for tests that must know whether calls ran on their callers'
// goroutines. Call it before c is used.
func CountWorkers(c *Client) *atomic.Int32 {
	n := new(atomic.Int32)
	spawn := c.workers.spawn
	c.workers.spawn = func(f func()) {
		n.Add(1)
		spawn(f)
	}
	return n
}
