package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// releaseOnce makes one release request for h. It is detached from any
// caller's cancellation (a release cancelled midway leaves its outcome
// unknown) and bounded by DefaultReleaseTimeout, whatever the backend call
// does.
func (c *Client) releaseOnce(h *hold) error { return c.releaseWithin(h, DefaultReleaseTimeout) }

// releaseWithin is releaseOnce bounded by bound.
func (c *Client) releaseWithin(h *hold, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_, _, err := withinCtx(ctx, c.workers, func(ctx context.Context) (struct{}, struct{}, error) {
		return struct{}{}, struct{}{}, c.backend.Release(ctx, h.Hold)
	})
	return err
}

// release gives up h after its last Unlock. When the request fails with its
// outcome unknown, the release goes on in the background (releaseLater).
func (c *Client) release(h *hold) error { return c.released(h, c.releaseOnce(h)) }

// releaseAsync is release, with its result sent on the returned channel,
// for an Unlock that need not wait for anything else first. The request
// runs on a worker, and its bound (DefaultReleaseTimeout, whatever the
// backend call does) is a timer that takes over only if the request is
// late, where release would wait on a goroutine of its own: Unlock hands
// its work to one goroutine instead of two. Close waits for the result.
//
// unknown says an earlier request for h timed out with its outcome
// unknown: then "not held", when it comes before h's client-side
// deadline (so before the server can have expired h), means that request
// released h, and counts as done.
func (c *Client) releaseAsync(h *hold, unknown bool) <-chan error {
	result := make(chan error, 1)
	done := c.started()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultReleaseTimeout)
	var reported atomic.Bool
	report := func(err error) { // once: by the request, or by the bound
		if reported.CompareAndSwap(false, true) {
			cancel()
			if unknown && errors.Is(err, ErrNotHeld) && c.beforeDeadline(h) {
				err = nil
			}
			result <- c.released(h, err)
			done()
		}
	}
	stop := context.AfterFunc(ctx, func() { report(ctx.Err()) })
	c.workers.run(func() {
		err := c.backend.Release(ctx, h.Hold)
		stop()
		report(err) // a late result is dropped: the bound has reported
	})
	return result
}

// releaseInline is the release of an Unlock on the caller's goroutine,
// for a backend whose calls keep their ctx's deadline
// (driver.DeadlineBound): no worker in between. The request is detached
// from ctx's cancellation (one cut midway leaves its outcome unknown) and
// gets CancelMargin at most, or until ctx's deadline: Unlock still returns
// within that margin of a cancellation. done is false when the margin ran
// out with ctx live (a slow server): the caller goes on through a worker
// (releaseAsync, the first request's outcome unknown).
func (c *Client) releaseInline(ctx context.Context, h *hold) (done bool, err error) {
	finished := c.started()
	defer finished()
	limit, own := inlineBound(ctx, time.Now())
	rctx, cancel := context.WithDeadline(context.Background(), limit)
	err = c.backend.Release(rctx, h.Hold)
	cancel()
	if err == nil || errors.Is(err, ErrNotHeld) || time.Now().Before(limit) {
		return true, c.released(h, err)
	}
	if own && ctx.Err() == nil {
		return false, nil
	}
	c.releaseLater(h, err)
	if !own { // ctx's deadline cut it
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return true, fmt.Errorf("dlock: unlock %q: the release goes on in the background: %w", h.Name, err)
}

// beforeDeadline reports whether h's client-side deadline is still
// ahead: the server, whose expiry comes later, still has h unless a
// release removed it.
func (c *Client) beforeDeadline(h *hold) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Before(h.deadline)
}

// released settles h after a release request that returned err, and
// returns what Unlock reports for it.
func (c *Client) released(h *hold, err error) error {
	switch {
	case err == nil:
		c.settle(h)
		return nil
	case errors.Is(err, ErrNotHeld):
		c.settle(h)
		return fmt.Errorf("dlock: release %q: the lease had ended on the server: %w", h.Name, err)
	}
	return c.retryRelease(h, err)
}

// retryRelease hands h, whose release failed with err (its outcome
// unknown), to releaseLater, and returns what Unlock reports for it.
func (c *Client) retryRelease(h *hold, err error) error {
	c.releaseLater(h, err)
	return fmt.Errorf("dlock: release %q failed, retrying in the background: %w", h.Name, err)
}

// releaseUntil releases h, retrying failures until the server confirms,
// says h is gone, or until passes; then a session-bound hold is handed to
// releaseLater. Close uses it.
func (c *Client) releaseUntil(h *hold, until time.Time) error {
	var err error
	for attempt := 0; ; attempt++ {
		if err = c.releaseOnce(h); err == nil || errors.Is(err, ErrNotHeld) {
			c.settle(h)
			return nil
		}
		delay := c.cfg.Backoff(attempt)
		if time.Now().Add(delay).After(until) {
			break
		}
		time.Sleep(delay)
	}
	if c.sessionBound() {
		c.releaseLater(h, err)
	} else {
		c.settle(h)
		c.cfg.Logger.Warn("dlock: release failed; giving up, the lock expires on the server at its TTL", "name", h.Name, "token", h.Token, "err", err)
	}
	return fmt.Errorf("dlock: release %q: %w", h.Name, err)
}

func (c *Client) sessionBound() bool {
	s, ok := c.backend.(driver.SessionBound)
	return ok && s.HoldsEndWithSession()
}

// releaseLater retries the release of h in the background after one whose
// outcome is unknown (first; nil to make the first attempt at once). h
// leaves c.holds at once: its server-side owner id is its own, so a new
// Lock of the name by c cannot re-enter it and simply waits for it like
// any other holder.
//
// A hold that expires on the server is retried until a TTL past its
// deadline (it has expired by then) or until c is closed; a session-bound
// one until the backend says it is gone, never while its session lives.
// Every give-up is logged.
func (c *Client) releaseLater(h *hold, first error) {
	c.settle(h)
	c.mu.Lock()
	giveUp := time.Now().Add(h.TTL)
	if !h.deadline.IsZero() {
		giveUp = h.deadline.Add(h.TTL)
	}
	c.mu.Unlock()
	if first != nil {
		c.cfg.Logger.Warn("dlock: release failed; retrying", "name", h.Name, "token", h.Token, "err", first)
	}
	sessionBound := c.sessionBound()
	run := c.background
	if sessionBound {
		run = c.linger // outlives Close while the session lives
	}
	run(func() {
		c.tel.releasePending(h.Name, 1)
		defer c.tel.releasePending(h.Name, -1)
		err := first
		for attempt := 0; ; attempt++ {
			if err != nil {
				timer := time.NewTimer(c.cfg.Backoff(attempt))
				closing := c.closing.Done()
				if sessionBound {
					closing = nil
				}
				select {
				case <-timer.C:
				case <-closing:
					timer.Stop()
				}
			}
			if err = c.releaseOnce(h); err == nil || errors.Is(err, ErrNotHeld) {
				return
			}
			if sessionBound {
				continue
			}
			if time.Now().After(giveUp) || c.closing.Err() != nil {
				c.cfg.Logger.Warn("dlock: release failed; giving up, the lock expires on the server at its TTL", "name", h.Name, "token", h.Token, "err", err)
				return
			}
		}
	})
}

// linger runs f, a session-bound release, on a goroutine of its own that
// Close awaits only for a bound (see awaitLingering).
func (c *Client) linger(f func()) {
	c.mu.Lock()
	if c.lingering == 0 {
		c.idle = make(chan struct{})
	}
	c.lingering++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.lingering--; c.lingering == 0 {
				close(c.idle)
			}
		}()
		f()
	}()
}

// awaitLingering waits at most d for the lingering releases to end and
// reports whether they did.
func (c *Client) awaitLingering(d time.Duration) bool {
	c.mu.Lock()
	idle := c.idle
	n := c.lingering
	c.mu.Unlock()
	if n == 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}
