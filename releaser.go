// The releaser: the one path by which a hold goes back to the server,
// whatever ended it (an Unlock, a loss, Close, a grant nobody took, an
// attempt whose outcome was not learnt). How, not whether, is the
// caller's to say (releaseHow); retrying a release that failed, giving
// up on it, and lingering while a session lives are decided here only.

package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// releaseHow is how a hold is released.
type releaseHow struct {
	// wait is how long the caller waits for the release's first outcome
	// (Unlock's ctx); nil: the caller does not wait, and the release runs
	// in the background.
	wait context.Context
	// until, when set, is how long the caller waits for the release,
	// failures retried (Close).
	until time.Time
	// handOn lets the lock pass straight to the next call chain in line
	// (driver.Transferer), in the request that ends the hold.
	handOn bool
	// revoke says the hold is an attempt whose outcome was not learnt:
	// its owner is revoked (driver.Revoker) rather than a grant released.
	revoke bool
}

// release gives h back on the server as how says, and returns what the
// caller reports of it: nil, an error wrapping ErrNotHeld when the
// server no longer had h, or why the release goes on in the background.
// A release that fails with its outcome unknown is retried until the
// server confirms it or says h is gone; one of a hold that expires on
// the server is given up a TTL past its deadline (or at Close), one of a
// hold that ends with its session never while the session lives. Every
// give-up is logged.
func (c *Client) release(h *hold, how releaseHow) error {
	if how.wait == nil && how.until.IsZero() {
		c.background(func() { _ = c.releasing(h, how, true) })
		return nil
	}
	if how.until.IsZero() && how.wait.Err() == nil && c.caller.bounded() && h.dog.finished() && (!how.handOn || !h.st.handsOn(h)) {
		// Most holds end before their watchdog starts, with nobody of
		// this Client waiting for the name: the release is all there is
		// to do, on the caller's goroutine.
		if done, err := c.releaseInline(how.wait, h); done {
			return err
		}
	}
	if how.wait != nil && how.wait.Err() != nil {
		// An Unlock whose ctx has ended says so, whatever the release
		// (which still happens) would have answered.
		c.background(func() { _ = c.releasing(h, how, true) })
		return fmt.Errorf("dlock: unlock %q: the release goes on in the background: %w", h.Name, how.wait.Err())
	}
	result := make(chan error, 1)
	c.background(func() { result <- c.releasing(h, how, false) })
	if how.wait == nil {
		return <-result // Close: releasing waits until how.until
	}
	select {
	case err := <-result:
		return err
	case <-how.wait.Done():
		return fmt.Errorf("dlock: unlock %q: the release goes on in the background: %w", h.Name, how.wait.Err())
	}
}

// giveBack gives back what the attempt r may hold for a caller that did
// not get it: g when it was granted (a late reply), or, when its outcome
// is unknown (err), whatever r.Owner holds of r.Name, revoked so that the
// attempt cannot grant it afterwards (driver.Revoker). A waiting attempt
// also leaves the server's queue (driver.Leaver), which gives back a
// grant made on the waiter's behalf. giveBack waits up to within for the
// first requests, so that a call that fails returns with nothing held
// unless the server is slow, and leaves the rest to the background.
func (c *Client) giveBack(r driver.Request, g driver.Grant, err error, within time.Duration) {
	if !g.Acquired && err == nil && !r.Wait {
		return // the server said no: nothing to give back
	}
	h := &hold{Hold: driver.Hold{Name: r.Name, Owner: r.Owner, TTL: r.TTL, Token: g.Token, Handle: g.Handle}}
	unknown := !g.Acquired && err != nil
	leaver, leaves := c.backend.(driver.Leaver)
	leaves = leaves && r.Wait
	if !g.Acquired && !unknown && !leaves {
		return
	}
	done := make(chan struct{}, 2)
	n := 0
	if leaves {
		n++
		c.background(func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithTimeout(context.Background(), DefaultReleaseTimeout)
			defer cancel()
			if err := leaver.Leave(ctx, r); err != nil {
				c.cfg.Logger.Warn("dlock: leaving the wait queue failed; the entry times out", "name", r.Name, "err", err)
			}
		})
	}
	if g.Acquired || unknown {
		n++
		c.background(func() {
			defer func() { done <- struct{}{} }()
			_ = c.releasing(h, releaseHow{revoke: unknown}, true)
		})
	}
	awaitWithin(done, n, within)
}

// awaitWithin waits for n sends on done, for up to within.
func awaitWithin(done <-chan struct{}, n int, within time.Duration) {
	if within <= 0 {
		return
	}
	margin := time.NewTimer(within)
	defer margin.Stop()
	for ; n > 0; n-- {
		select {
		case <-done:
		case <-margin.C:
			return
		}
	}
}

// releasing is the release itself, on a goroutine Close waits for (but
// for the retries of a session-bound hold, which linger): the hand-off
// or the release request, then retries as release says. quiet says that
// nobody reads the result, so only failures are worth a log line.
func (c *Client) releasing(h *hold, how releaseHow, quiet bool) error {
	h.dog.wait()
	if how.handOn {
		if handed, err := c.handOff(h); handed {
			return err
		}
	}
	err := c.releaseOnce(h, how.revoke)
	if !how.until.IsZero() {
		return c.releaseUntil(h, how, err)
	}
	return c.released(h, how, err, false, quiet)
}

// releaseOnce makes one release request for h (a revocation of its owner
// when revoke), detached from any caller's cancellation (a release cut
// midway leaves its outcome unknown) and bounded by
// DefaultReleaseTimeout, whatever the backend call does.
func (c *Client) releaseOnce(h *hold, revoke bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), DefaultReleaseTimeout)
	defer cancel()
	_, err := read(c.caller, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.request(ctx, h, revoke)
	})
	return err
}

// request is the release request: Release of h, or for an attempt whose
// outcome is unknown, Revoke of its owner (Release with no token where
// the backend cannot revoke).
func (c *Client) request(ctx context.Context, h *hold, revoke bool) error {
	if revoke {
		if rv, ok := c.backend.(driver.Revoker); ok {
			return rv.Revoke(ctx, driver.Request{Name: h.Name, Owner: h.Owner, TTL: h.TTL})
		}
		return c.backend.Release(ctx, driver.Hold{Name: h.Name, Owner: h.Owner, TTL: h.TTL})
	}
	return c.backend.Release(ctx, h.Hold)
}

// releaseInline is the release of an Unlock on the caller's goroutine,
// for a backend whose calls keep their ctx's deadline (see
// caller.inline): no worker in between. The request is detached from
// ctx's cancellation (one cut midway leaves its outcome unknown) and gets
// CancelMargin at most, or until ctx's deadline, so Unlock returns within
// that margin of a cancellation. done is false when the margin ran out
// with ctx live (a slow server): the caller goes on through a worker,
// the first request's outcome unknown (release says what that means).
func (c *Client) releaseInline(ctx context.Context, h *hold) (done bool, err error) {
	finished := c.started()
	defer finished()
	limit, own := inlineBound(ctx, time.Now())
	rctx, cancel := context.WithDeadline(context.Background(), limit)
	err = c.backend.Release(rctx, h.Hold)
	cancel()
	if err == nil || errors.Is(err, ErrNotHeld) || time.Now().Before(limit) {
		return true, c.released(h, releaseHow{}, err, false, false)
	}
	if own && ctx.Err() == nil {
		result := make(chan error, 1)
		c.background(func() { result <- c.released(h, releaseHow{}, c.releaseOnce(h, false), true, false) })
		select {
		case err := <-result:
			return true, err
		case <-ctx.Done():
			return true, fmt.Errorf("dlock: unlock %q: the release goes on in the background: %w", h.Name, ctx.Err())
		}
	}
	c.retry(h, releaseHow{}, err)
	if !own { // ctx's deadline cut it
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return true, fmt.Errorf("dlock: unlock %q: the release goes on in the background: %w", h.Name, err)
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

// released settles h after a release request that returned err, and
// returns what Unlock reports for it. unknown says an earlier request
// for h timed out with its outcome unknown: then "not held", when it
// comes before h's client-side deadline (so before the server can have
// expired h), means that request released h.
func (c *Client) released(h *hold, how releaseHow, err error, unknown, quiet bool) error {
	switch {
	case err == nil:
		c.settle(h)
		return nil
	case errors.Is(err, ErrNotHeld):
		c.settle(h)
		if how.revoke {
			c.sweep(h)
			return nil
		}
		if unknown && time.Now().Before(c.deadlineOf(h)) {
			return nil
		}
		if quiet {
			c.cfg.Logger.Debug("dlock: released a hold the server no longer had", "name", h.Name, "token", h.Token, "err", err)
		}
		return fmt.Errorf("dlock: release %q: the lease had ended on the server: %w", h.Name, err)
	}
	c.retry(h, how, err)
	return fmt.Errorf("dlock: release %q failed, retrying in the background: %w", h.Name, err)
}

// sweep follows the give-back of an attempt whose outcome is unknown,
// on a backend that cannot revoke its owner (driver.Revoker), when the
// server said it held nothing for it: the attempt may still be on its way
// (a request cut off with its connection can reach the server after a
// give-back sent on another). Its owner's holds are released again, at
// growing pauses up to an eighth of the TTL, until a TTL has passed, so a
// grant that arrives late lasts at most one pause instead of its TTL. It
// stops at Close.
func (c *Client) sweep(h *hold) {
	if _, ok := c.backend.(driver.Revoker); ok {
		return
	}
	end := time.Now().Add(h.TTL)
	c.background(func() {
		pause := min(100*time.Millisecond, h.TTL/8)
		for time.Now().Before(end) {
			timer := time.NewTimer(pause)
			select {
			case <-timer.C:
			case <-c.closing.Done():
				timer.Stop()
				return
			}
			if err := c.releaseOnce(h, true); err == nil {
				c.cfg.Logger.Warn("dlock: released a grant that reached the server after its attempt was given back", "name", h.Name)
			}
			pause = min(2*pause, h.TTL/8)
		}
	})
}

// deadlineOf is h's client-side deadline; the zero time for a hold never
// granted to a caller.
func (c *Client) deadlineOf(h *hold) time.Time {
	if h.st == nil {
		return time.Time{}
	}
	return h.st.deadline(h)
}

// settle forgets h once it is released (or given up).
func (c *Client) settle(h *hold) {
	if h.st != nil {
		h.st.settle(h)
		c.forget(h.st)
	}
}

// releaseUntil retries the release of h, whose first request returned
// err, until the server confirms, says h is gone, or how.until passes;
// then a session-bound hold is handed to retry. Close uses it.
func (c *Client) releaseUntil(h *hold, how releaseHow, err error) error {
	for attempt := 0; err != nil && !errors.Is(err, ErrNotHeld); attempt++ {
		delay := c.cfg.Backoff(attempt)
		if time.Now().Add(delay).After(how.until) {
			if c.sessionBound() {
				c.retry(h, how, err)
			} else {
				c.settle(h)
				c.cfg.Logger.Warn("dlock: release failed; giving up, the lock expires on the server at its TTL", "name", h.Name, "token", h.Token, "err", err)
			}
			return fmt.Errorf("dlock: release %q: %w", h.Name, err)
		}
		time.Sleep(delay)
		err = c.releaseOnce(h, how.revoke)
	}
	c.settle(h)
	return nil
}

func (c *Client) sessionBound() bool {
	s, ok := c.backend.(driver.SessionBound)
	return ok && s.HoldsEndWithSession()
}

// retry retries the release of h in the background after one whose
// outcome is unknown (first). h leaves its nameState at once: its
// server-side owner id is its own, so a new Lock of the name by this
// Client cannot re-enter it and simply waits for it like any other
// holder.
//
// A hold that expires on the server is retried until a TTL past its
// deadline (it has expired by then) or until Close; a session-bound one
// until the backend says it is gone, never while its session lives.
// Every give-up is logged.
func (c *Client) retry(h *hold, how releaseHow, first error) {
	giveUp := time.Now().Add(h.TTL)
	if d := c.deadlineOf(h); !d.IsZero() {
		giveUp = d.Add(h.TTL)
	}
	c.settle(h)
	c.cfg.Logger.Warn("dlock: release failed; retrying", "name", h.Name, "token", h.Token, "err", first)
	sessionBound := c.sessionBound()
	if !sessionBound && c.closing.Err() != nil {
		// Closed: a retry started now would outlive Close, which no
		// longer waits for new work.
		c.cfg.Logger.Warn("dlock: release failed after Close; giving up, the lock expires on the server at its TTL", "name", h.Name, "token", h.Token, "err", first)
		return
	}
	run := c.background
	if sessionBound {
		run = c.linger // outlives Close while the session lives
	}
	run(func() {
		c.tel.releasePending(h.Name, 1)
		defer c.tel.releasePending(h.Name, -1)
		var closing <-chan struct{}
		if !sessionBound {
			closing = c.closing.Done()
		}
		for attempt := 0; ; attempt++ {
			timer := time.NewTimer(c.cfg.Backoff(attempt))
			select {
			case <-timer.C:
			case <-closing:
				timer.Stop()
			}
			err := c.releaseOnce(h, how.revoke)
			if err == nil || errors.Is(err, ErrNotHeld) {
				return
			}
			if !sessionBound && (time.Now().After(giveUp) || c.closing.Err() != nil) {
				c.cfg.Logger.Warn("dlock: release failed; giving up, the lock expires on the server at its TTL", "name", h.Name, "token", h.Token, "err", err)
				return
			}
		}
	})
}

// handOff passes the lock of h, whose last lease has ended, straight to
// the first call chain of this Client waiting for its name, in one
// request (see driver.Transferer and WithHandOffs). It reports whether it
// took h over: when it did not, h is still to be released. When it did,
// h has been handed on or released, and err is what Unlock reports.
//
// The next hold is granted only after h's leases have all ended and its
// watchdog has stopped, so the lease rule holds as for any release and
// acquire: no Done of h is open when the next owner is granted.
func (c *Client) handOff(h *hold) (bool, error) {
	tr, ok := c.backend.(driver.Transferer)
	if !ok {
		return false, nil
	}
	st := h.st
	next, call := st.nextInLine(h)
	if next == nil {
		return false, nil
	}
	r := driver.Request{Name: next.Name, Owner: next.Owner, TTL: next.TTL, Wait: true, Payload: next.payload}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultReleaseTimeout)
	defer cancel()
	sent := time.Now()
	g, err, pending := within(c.caller, ctx, c.caller.inline(ctx), CancelMargin, func(ctx context.Context) (driver.Grant, error) {
		return tr.Transfer(ctx, h.Hold, r)
	}, func(g driver.Grant, err error) { c.giveBack(r, g, err, 0) })
	switch {
	case err != nil:
		// Unknown outcome: whatever r.Owner may hold is given back, and
		// h is released in the background, as after any failed release.
		if !pending {
			c.giveBack(r, driver.Grant{}, err, 0)
		}
		c.settle(next)
		c.retry(h, releaseHow{}, err)
		return true, fmt.Errorf("dlock: release %q failed, retrying in the background: %w", h.Name, err)
	case !g.Acquired:
		// Nothing changed on the server: release h as usual, then let the
		// first in line take the name on the server.
		err := c.released(h, releaseHow{}, c.releaseOnce(h, false), false, false)
		c.settle(next)
		return true, err
	}
	if term := termOf(next, g); time.Since(sent) > term/3 || term < next.TTL && !c.cfg.AutoRenew {
		// A slow request, or a first term shorter than the TTL with no
		// watchdog to renew within it: renew once and count from there
		// (see settleGrant).
		if sent, err = c.confirm(ctx, next, g); err != nil {
			c.settle(next)
			return true, nil // h was handed on; next is lost or given back
		}
		g.Term = 0
	}
	l, err := c.grant(next, g, sent)
	if err != nil {
		return true, nil // Close ran meanwhile; grant gave next back
	}
	if !st.handTo(call, l) {
		// Whoever waited has left meanwhile (or the first in line now
		// asks for another TTL or payload): h was handed on all the
		// same, and its Unlock succeeded; the lock goes back (or on) from
		// here.
		c.background(func() {
			if err := l.Unlock(context.Background()); err != nil {
				c.cfg.Logger.Warn("dlock: giving back a lock handed to a Lock that had left", "name", h.Name, "err", err)
			}
		})
	}
	return true, nil
}

// linger runs f, a session-bound release, on a goroutine of its own that
// Close awaits only for a bound (see awaitLingering).
func (c *Client) linger(f func()) {
	done := c.lingers()
	go func() {
		defer done()
		f()
	}()
}
