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
	var (
		lastErr  error
		failures int
		inFlight chan error // the running renewal's result, nil when none
	)
	// settleRenewal waits for a renewal still running, so no request for
	// the hold outlives it; the lease is ending, so its outcome is only
	// worth a debug line.
	settleRenewal := func() {
		if inFlight == nil {
			return
		}
		if err := <-inFlight; err != nil {
			c.cfg.Logger.Debug("dlock: renewal ended after the lease", "name", h.Name, "token", h.Token, "err", err)
		}
	}
	for {
		c.mu.Lock()
		deadline := h.deadline
		c.mu.Unlock()
		expire := time.NewTimer(time.Until(deadline))
		select {
		case <-h.ctx.Done():
			expire.Stop()
			settleRenewal()
			return
		case err := <-lost:
			expire.Stop()
			c.lose(h, err, settleRenewal)
			return
		case <-expire.C:
			c.mu.Lock()
			extended := time.Now().Before(h.deadline)
			c.mu.Unlock()
			if extended {
				continue
			}
			if renew == nil {
				// WithoutAutoRenew: nobody was to renew it but Refresh.
				c.lose(h, errors.New("lease expired: not refreshed within the TTL (WithoutAutoRenew)"), settleRenewal)
				return
			}
			cause := lastErr
			if cause == nil {
				cause = errors.New("lease expired before it was renewed")
				if inFlight != nil {
					cause = errors.New("the renewal did not return before the lease's deadline")
				}
			}
			c.lose(h, fmt.Errorf("renewal not confirmed within the TTL: %w", cause), settleRenewal)
			return
		case <-renewC:
			expire.Stop()
			inFlight = make(chan error, 1)
			go func(done chan<- error) {
				ctx, cancel := context.WithDeadline(context.Background(), deadline)
				defer cancel()
				done <- c.refresh(ctx, h)
			}(inFlight)
		case err := <-inFlight:
			expire.Stop()
			inFlight = nil
			switch {
			case h.ctx.Err() != nil:
				return
			case err == nil:
				failures, lastErr = 0, nil
				renew.Reset(interval)
			case errors.Is(err, ErrNotHeld):
				c.lose(h, err, settleRenewal)
				return
			default:
				lastErr = err
				c.cfg.Logger.Warn("dlock: renewal failed, retrying", "name", h.Name, "token", h.Token, "err", err)
				renew.Reset(min(interval, c.cfg.Backoff(failures)))
				failures++
			}
		}
	}
}

// refresh extends h on the server and moves its deadline. It returns by
// ctx's deadline whatever the backend call does.
func (c *Client) refresh(ctx context.Context, h *hold) error {
	sent := time.Now()
	_, _, err := withinCtx(ctx, c.workers, func(ctx context.Context) (struct{}, struct{}, error) {
		return struct{}{}, struct{}{}, c.backend.Refresh(ctx, h.Hold)
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

// lose ends h because it was lost: its leases' Done close at once and
// their Err wrap ErrLost and cause. Then, once settle has waited for a
// renewal in flight, h is released on the server (best effort; the
// release checks the token, so it cannot touch a newer hold): a lost lease
// may still be live there, and freeing it early helps the next owner.
func (c *Client) lose(h *hold, cause error, settle func()) {
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
	h.cancel()
	c.mu.Unlock()
	c.cfg.Logger.Warn("dlock: lease lost", "name", h.Name, "owner", h.Owner, "token", h.Token, "err", cause)
	settle()
	c.releaseLater(h, nil)
}
