package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// watch renews h every TTL/3, the first time after first (when
// auto-renewal is on), and ends it when its deadline passes unconfirmed,
// the server says it is gone, or the backend reports the hold lost.
//
// The deadline is enforced here, not by the renewal: a renewal runs on its
// own goroutine, so a backend call that hangs (a frozen server, a
// blackholed link, a driver that ignores ctx) cannot keep Done open past
// the deadline. A renewal still in flight when the hold ends is waited for
// before watch returns, so a release never overlaps it (on a pinned
// connection, cancelling a statement can end the session).
func (c *Client) watch(h *hold, lost <-chan error, first time.Duration) {
	defer c.wg.Done()
	defer close(h.watched)
	var renew *time.Timer
	if c.cfg.AutoRenew {
		renew = time.NewTimer(first)
		defer renew.Stop()
	}
	c.renewLoop(h, lost, renew, h.TTL/3)
}

func (c *Client) renewLoop(h *hold, lost <-chan error, renew *time.Timer, interval time.Duration) {
	var renewC <-chan time.Time
	if renew != nil {
		renewC = renew.C
	}
	r := &renewal{c: c, h: h}
	for {
		c.mu.Lock()
		deadline := h.deadline
		c.mu.Unlock()
		expire := time.NewTimer(time.Until(deadline))
		select {
		case <-h.ctx.Done():
			expire.Stop()
			r.settle()
			return
		case err := <-lost:
			expire.Stop()
			c.lose(h, err, lostSession, r.settle)
			return
		case <-expire.C:
			if c.extended(h) {
				continue
			}
			c.lose(h, r.expired(renew != nil), lostDeadline, r.settle)
			return
		case <-renewC:
			expire.Stop()
			r.start(deadline)
		case err := <-r.inFlight:
			expire.Stop()
			r.inFlight = nil
			if h.ctx.Err() != nil {
				return
			}
			next, lostErr := r.finished(err, interval)
			if lostErr != nil {
				c.lose(h, lostErr, lostNotHeld, r.settle)
				return
			}
			renew.Reset(next)
		}
	}
}

// extended reports whether h's deadline has moved past now.
func (c *Client) extended(h *hold) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Before(h.deadline)
}

// renewal is a hold's watchdog between renewals: the one running, and
// how the last ones failed.
type renewal struct {
	c        *Client
	h        *hold
	lastErr  error
	failures int
	inFlight chan error // the running renewal's result, nil when none
}

// start sends a renewal that must answer by deadline.
func (r *renewal) start(deadline time.Time) {
	r.inFlight = make(chan error, 1)
	go func(done chan<- error) {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		done <- r.c.refresh(ctx, r.h)
	}(r.inFlight)
}

// finished takes a renewal's result: when to renew next, or why the
// lease is lost.
func (r *renewal) finished(err error, interval time.Duration) (next time.Duration, lost error) {
	switch {
	case err == nil:
		r.failures, r.lastErr = 0, nil
		return interval, nil
	case errors.Is(err, ErrNotHeld):
		return 0, err
	}
	r.lastErr = err
	r.c.cfg.Logger.Warn("dlock: renewal failed, retrying", "name", r.h.Name, "token", r.h.Token, "err", err)
	next = min(interval, r.c.cfg.Backoff(r.failures))
	r.failures++
	return next, nil
}

// expired is why the lease ended at its deadline, unrenewed; auto is
// false WithoutAutoRenew.
func (r *renewal) expired(auto bool) error {
	if !auto {
		// Nobody was to renew it but Refresh.
		return errors.New("lease expired: not refreshed within the TTL (WithoutAutoRenew)")
	}
	cause := r.lastErr
	if cause == nil {
		cause = errors.New("lease expired before it was renewed")
		if r.inFlight != nil {
			cause = errors.New("the renewal did not return before the lease's deadline")
		}
	}
	return fmt.Errorf("renewal not confirmed within the TTL: %w", cause)
}

// settle waits for a renewal still running, so no request for the hold
// outlives it; the lease is ending, so its outcome is only worth a debug
// line.
func (r *renewal) settle() {
	if r.inFlight == nil {
		return
	}
	if err := <-r.inFlight; err != nil {
		r.c.cfg.Logger.Debug("dlock: renewal ended after the lease", "name", r.h.Name, "token", r.h.Token, "err", err)
	}
}

// refresh extends h on the server and moves its deadline. It returns by
// ctx's deadline whatever the backend call does.
func (c *Client) refresh(ctx context.Context, h *hold) error {
	sent := time.Now()
	renew := c.tel.renewal(h, func(ctx context.Context) error { return c.backend.Refresh(ctx, h.Hold) })
	_, _, err := withinCtx(ctx, c.workers, func(ctx context.Context) (struct{}, struct{}, error) {
		return struct{}{}, struct{}{}, renew(ctx)
	})
	if err != nil {
		return err
	}
	c.mu.Lock()
	if d := sent.Add(h.TTL - drift(h.TTL)); h.state == held && d.After(h.deadline) {
		h.deadline = d
	}
	c.mu.Unlock()
	return nil
}

// Why a lease was lost, for telemetry (dlock.lease.lost's dlock.cause).
const (
	lostNotHeld  = "not_held" // the server says the hold is gone
	lostDeadline = "deadline" // no renewal confirmed it before its deadline
	lostSession  = "session"  // the backend reported it lost (driver.Grant.Lost)
)

// lose ends h because it was lost (why: lostNotHeld, lostDeadline or
// lostSession): its leases' Done close at once and their Err wrap ErrLost
// and cause. Then, once settle has waited for a renewal in flight, h is
// released on the server (best effort; the release checks the token, so
// it cannot touch a newer hold): a lost lease may still be live there,
// and freeing it early helps the next owner.
func (c *Client) lose(h *hold, cause error, why string, settle func()) {
	err := fmt.Errorf("%w: %q: %w", ErrLost, h.Name, cause)
	c.mu.Lock()
	if h.state != held {
		c.mu.Unlock()
		return
	}
	for l := range h.leases {
		l.end(err)
	}
	h.state = ending
	measured := measuredEnd(h)
	h.cancel()
	c.mu.Unlock()
	c.tel.holdEnds(h.Name, &measured, "lost")
	c.tel.leaseLost(h.Name, why)
	c.cfg.Logger.Warn("dlock: lease lost", "name", h.Name, "owner", h.Owner, "token", h.Token, "err", cause)
	settle()
	c.releaseLater(h, nil)
}
