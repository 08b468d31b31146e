package dlock

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
