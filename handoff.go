package dlock

import (
	"context"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// handOff passes the lock of h, whose last lease has ended, straight to the
// first call chain of c waiting for its name, in one request (see
// driver.Transferer and WithHandOffs). It reports whether it took h over:
// when it did not, h is still c's to release. When it did, h has been
// handed on or released, and err is what Unlock reports for it.
//
// The next hold is granted only after h's leases have all ended (this runs
// after the last Unlock and after h's watchdog has stopped), so the lease
// rule holds as for any release and acquire: no Done of h is open when the
// next owner is granted.
func (c *Client) handOff(h *hold) (bool, error) {
	tr, ok := c.backend.(driver.Transferer)
	if !ok {
		return false, nil
	}
	c.mu.Lock()
	if !c.handsOn(h) {
		c.mu.Unlock()
		return false, nil
	}
	// The next hold takes h's place at once, so no other chain of c sees
	// the name free meanwhile; it is granted to whoever is first in line
	// when the request returns.
	call := c.queues[h.Name].waiting[0].call
	next := c.newHold(call, c.newOwner())
	next.handOffs = h.handOffs + 1
	close(h.gone)
	c.mu.Unlock()

	r := driver.Request{Name: next.Name, Owner: next.Owner, TTL: next.TTL, Wait: true, Payload: next.payload}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultReleaseTimeout)
	defer cancel()
	sent := time.Now()
	g, err := c.call(ctx, r, func(ctx context.Context, r driver.Request) (driver.Grant, error) {
		return tr.Transfer(ctx, h.Hold, r)
	})
	switch {
	case err != nil:
		// Unknown outcome: call gives back whatever r.Owner may hold;
		// h is released in the background, as after any failed release.
		c.settle(next)
		return true, c.retryRelease(h, err)
	case !g.Acquired:
		// Nothing changed on the server: release h as usual, then let the
		// first in line take the name on the server.
		err := c.release(h)
		c.settle(next)
		return true, err
	}
	if term := termOf(next, g); time.Since(sent) > term/3 || term < next.TTL && !c.cfg.AutoRenew {
		// A slow request, or a first term shorter than the TTL with no
		// watchdog to renew within it: renew once and count from there
		// (see acquire).
		if sent, err = c.confirm(ctx, next, g); err != nil {
			c.settle(next)
			return true, nil // h was handed on; next is lost or given back
		}
		g.Term = 0
	}
	granted, err := c.grant(next, g, sent)
	if err != nil {
		return true, nil // c closed meanwhile; grant gave next back
	}
	l := granted.(*lease)
	c.mu.Lock()
	if q := c.queues[h.Name]; q != nil && q.handed == nil && len(q.waiting) > 0 && q.waiting[0].owner == "" && q.waiting[0].call.sameHold(call) {
		t := q.waiting[0]
		q.waiting = q.waiting[1:]
		q.handed, t.lease = t, l
		close(t.ready)
		c.mu.Unlock()
		return true, nil
	}
	c.mu.Unlock()
	// Whoever waited has left meanwhile (or the first in line now asks for
	// another TTL or payload): h was handed on all the same, and its
	// Unlock succeeded; the lock goes back (or on) from here.
	c.giveBack(l)
	return true, nil
}

// handsOn reports whether h, whose last lease has ended, would be handed
// on (see handOff). c.mu must be held.
func (c *Client) handsOn(h *hold) bool {
	if _, ok := c.backend.(driver.Transferer); !ok || c.cfg.HandOffs == 0 || c.shared {
		return false
	}
	q := c.queues[h.Name]
	if c.closed || c.holds[h.Name] != h || q == nil || q.handed != nil || len(q.waiting) == 0 || q.waiting[0].owner != "" {
		return false
	}
	// After HandOffs in a row, through the server: other processes'
	// waiters may have waited through every hold handed on so far.
	return h.handOffs < c.cfg.HandOffs
}

// giveBack unlocks l, a lease handed on to a chain that had left before
// it took it, in the background: Unlock hands the lock to the next in
// line, or releases it.
func (c *Client) giveBack(l *lease) {
	c.background(func() {
		if err := l.Unlock(context.Background()); err != nil {
			c.cfg.Logger.Warn("dlock: giving back a lock handed to a Lock that had left", "name", l.h.Name, "err", err)
		}
	})
}
