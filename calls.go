// The call machinery: every request that may grant or release a hold runs
// here, on the caller's goroutine when the backend keeps its ctx's
// deadline and otherwise on a worker the caller can leave behind when ctx
// ends; what a call the caller left behind holds is released in the
// background, which Close waits for.

package dlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// waitInline is a blocking attempt (driver.Blocker) on the caller's
// goroutine, for a backend whose calls keep their ctx
// (driver.DeadlineBound): its wait ends within CancelMargin of ctx's end,
// whatever the server does, so no worker need stand between it and the
// caller. The grant then reaches the caller without a goroutine to wake.
func (c *Client) waitInline(ctx context.Context, r driver.Request, call func(context.Context, driver.Request) (driver.Grant, error)) (driver.Grant, error) {
	done := c.started() // Close waits for it, as for call's goroutine
	defer done()
	g, err := call(ctx, r)
	if err != nil {
		c.cleanupWithin(ctx, r, g, err)
	}
	return g, err
}

// boundsCalls reports whether the backend's calls keep their ctx's
// deadline (driver.DeadlineBound), so they may run on the caller's
// goroutine.
func (c *Client) boundsCalls() bool {
	b, ok := c.backend.(driver.DeadlineBound)
	return ok && b.BoundsCalls()
}

// callInline is call on the caller's goroutine, for a backend whose calls
// keep their ctx's deadline: it saves handing the request to a worker and
// its result back. The call gets CancelMargin at most, so a ctx cancelled
// meanwhile (which such a backend does not watch, only deadlines) is
// honoured within that margin, as call honours it. ok is false when that
// bound ran out with ctx still live, the request's outcome unknown: a slow
// server, which the caller waits for through call, making the request
// again (an attempt is idempotent for its hold).
func (c *Client) callInline(ctx context.Context, r driver.Request, call func(context.Context, driver.Request) (driver.Grant, error)) (g driver.Grant, ok bool, err error) {
	done := c.started() // Close waits for it, as for call's goroutine
	defer done()
	limit, own := inlineBound(ctx, time.Now())
	bound, cancel := context.WithDeadline(ctx, limit)
	g, err = call(bound, r)
	cancel()
	// The driver's deadline and ctx's timer do not fire at the same
	// instant: the clock tells whether the bound ran out.
	if err != nil && own && ctx.Err() == nil && !time.Now().Before(limit) {
		return driver.Grant{}, false, nil
	}
	if err != nil {
		c.cleanupWithin(ctx, r, g, err)
	}
	return g, true, err
}

// inlineBound is when a request made on the caller's goroutine at now
// must end: CancelMargin later, or at ctx's deadline if that is sooner.
// own is true when the bound is not ctx's deadline: a request that ran
// out of it with ctx live met a slow server.
func inlineBound(ctx context.Context, now time.Time) (limit time.Time, own bool) {
	limit = now.Add(CancelMargin)
	if d, ok := ctx.Deadline(); ok && !d.After(limit) {
		return d, false
	}
	return limit, true
}

// call runs call, a request that may grant r (an attempt, a hand-off),
// and returns by ctx's deadline whatever the backend call does; a call
// still running then is cleaned up when it returns (see cleanup).
func (c *Client) call(ctx context.Context, r driver.Request, call func(context.Context, driver.Request) (driver.Grant, error)) (driver.Grant, error) {
	const (
		pending = iota
		finished
		gaveUp
	)
	var (
		state atomic.Int32
		done  = make(chan struct{})
		g     driver.Grant
		err   error
	)
	// The call runs on a goroutine that Close waits for, so a closed
	// Client has given back whatever its last attempts took. Whoever of
	// the call and the caller moves state first decides who owns the
	// result: the caller, or (when it gave up) the goroutine's clean-up.
	c.background(func() {
		g, err = call(ctx, r)
		if !state.CompareAndSwap(pending, finished) {
			c.cleanup(r, g, err, true)
			return
		}
		close(done)
	})
	select {
	case <-done:
	case <-ctx.Done():
		// A backend that honours ctx ends its call (and whatever it
		// queued on the server) within moments: wait that long, so the
		// caller returns with nothing left behind. One that does not is
		// left to its goroutine.
		margin := time.NewTimer(CancelMargin)
		defer margin.Stop()
		select {
		case <-done:
		case <-margin.C:
			if state.CompareAndSwap(pending, gaveUp) {
				return driver.Grant{}, ctx.Err()
			}
			<-done
		}
		if g.Acquired {
			c.cleanup(r, g, err, true)
			return driver.Grant{}, ctx.Err()
		}
	}
	if err != nil {
		c.cleanupWithin(ctx, r, g, err)
	}
	return g, err
}

// cleanupWithin is cleanup after an attempt that failed while its caller
// still waits: one release is tried at once, within the caller's ctx (so
// a failed Lock returns with nothing held), and the rest is left to the
// background.
func (c *Client) cleanupWithin(ctx context.Context, r driver.Request, g driver.Grant, err error) {
	h := &hold{Hold: driver.Hold{Name: r.Name, Owner: r.Owner, TTL: r.TTL}, gone: make(chan struct{})}
	bound := DefaultReleaseTimeout
	if d, ok := ctx.Deadline(); ok {
		bound = min(bound, time.Until(d)+CancelMargin)
	}
	if ctx.Err() == nil && bound > 0 {
		if rerr := c.releaseWithin(h, bound); rerr == nil || errors.Is(rerr, ErrNotHeld) {
			return
		}
	}
	c.cleanup(r, g, err, false)
}

// cleanup gives back whatever an attempt that failed, or that its caller
// gave up on, may hold: the grant when it succeeded late or, when its
// outcome is unknown (err), any hold of the request's owner id, which is
// unique to this hold, so nothing else can be touched. now makes the first
// tries here, for a goroutine that Close waits for.
func (c *Client) cleanup(r driver.Request, g driver.Grant, err error, now bool) {
	if !g.Acquired && err == nil {
		return
	}
	h := &hold{Hold: driver.Hold{Name: r.Name, Owner: r.Owner, Token: g.Token, TTL: r.TTL, Handle: g.Handle}, gone: make(chan struct{})}
	if !g.Acquired {
		h.Token, h.Handle = 0, nil
	}
	if now {
		_ = c.releaseUntil(h, time.Now().Add(DefaultReleaseTimeout))
		return
	}
	// err is the attempt's, not a release's: the first release is made
	// at once, and only a release that fails is worth a warning.
	c.releaseLater(h, nil)
}

// background runs f on a goroutine that Close waits for, if it starts
// before Close.
func (c *Client) background(f func()) {
	done := c.started()
	c.workers.run(func() {
		defer done()
		f()
	})
}

// started counts a task that Close waits for, unless c is closed already,
// and returns what ends it.
func (c *Client) started() (done func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return func() {}
	}
	c.wg.Add(1)
	return c.wg.Done
}
