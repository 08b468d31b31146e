package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// watchdog renews one hold every TTL/3 (when auto-renewal is on) and
// ends it when its deadline passes unconfirmed, the server says it is
// gone, or the backend reports it lost.
//
// The deadline is enforced here, not by the renewal: a renewal runs on
// its own goroutine, so a backend call that hangs (a frozen server, a
// blackholed link, a driver that ignores ctx) cannot keep Done open past
// the deadline. A renewal still in flight when the hold ends is waited for
// before the watchdog exits, and a release waits for that (wait), so a
// release never overlaps it (on a pinned connection, cancelling a
// statement can end the session).
//
// Most holds end before their first renewal is due, so the watchdog's
// goroutine starts only then, from a timer; a hold that ends before
// never starts it.
type watchdog struct {
	h *hold

	mu      sync.Mutex
	ctx     context.Context // cancelled by stop
	cancel  context.CancelFunc
	timer   *time.Timer   // starts the goroutine, until it has
	counted func()        // ends the count Close waits for (Client.started)
	exited  chan struct{} // closed once run has been called and the goroutine has exited, or will never start
	stopped bool
}

func newWatchdog(h *hold) *watchdog {
	ctx, cancel := context.WithCancel(context.Background())
	return &watchdog{h: h, ctx: ctx, cancel: cancel, exited: make(chan struct{})}
}

// run starts the watchdog of h, granted for term: at once when the
// backend reports losses (lost), otherwise a third into the term, or
// halfway to a nearer deadline (a grant on the waiter's behalf may come
// late in its term), and renews then.
func (w *watchdog) run(lost <-chan error, term time.Duration) {
	c := w.h.st.c
	left := time.Until(w.h.st.deadline(w.h)) // before w.mu: stop runs under the nameState's lock
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		close(w.exited)
		return
	}
	w.counted = c.started()
	if lost != nil {
		go w.watch(lost, term/3)
		return
	}
	first := min(term/3, left/2)
	w.timer = time.AfterFunc(first, func() { w.watch(nil, 0) })
}

// stop ends the watchdog: at once when its goroutine has not started.
// It may be called with the hold's nameState locked.
func (w *watchdog) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	w.cancel()
	if w.timer != nil && w.timer.Stop() {
		close(w.exited)
		w.counted()
	}
}

// wait returns once the watchdog, stopped, makes no request any more.
func (w *watchdog) wait() {
	if w != nil {
		<-w.exited
	}
}

// finished reports whether wait would return at once.
func (w *watchdog) finished() bool {
	if w == nil {
		return true
	}
	select {
	case <-w.exited:
		return true
	default:
		return false
	}
}

// watch is the watchdog's goroutine: it renews every TTL/3, the first
// time after first, and ends the hold as the type's doc says.
func (w *watchdog) watch(lost <-chan error, first time.Duration) {
	defer w.counted()
	defer close(w.exited)
	h := w.h
	st, c := h.st, h.st.c
	var renew *time.Timer
	var renewC <-chan time.Time
	if c.cfg.AutoRenew {
		renew = time.NewTimer(first)
		defer renew.Stop()
		renewC = renew.C
	}
	interval := h.TTL / 3
	r := &renewal{c: c, h: h}
	for {
		expire := time.NewTimer(time.Until(st.deadline(h)))
		select {
		case <-w.ctx.Done():
			expire.Stop()
			r.settle()
			return
		case err := <-lost:
			expire.Stop()
			w.lose(err, lostSession, r)
			return
		case <-expire.C:
			if time.Now().Before(st.deadline(h)) {
				continue // renewed meanwhile
			}
			w.lose(r.expired(renew != nil), lostDeadline, r)
			return
		case <-renewC:
			expire.Stop()
			r.start(st.deadline(h))
		case err := <-r.inFlight:
			expire.Stop()
			r.inFlight = nil
			if w.ctx.Err() != nil {
				return
			}
			next, lostErr := r.finished(err, interval)
			if lostErr != nil {
				w.lose(lostErr, lostNotHeld, r)
				return
			}
			renew.Reset(next)
		}
	}
}

// lose ends the hold as lost (why: lostNotHeld, lostDeadline or
// lostSession): its leases' Done close at once. Then, once a renewal in
// flight has returned, it is released on the server (best effort; the
// release names the token, so it cannot touch a newer hold): a lost lease
// may still be live there, and freeing it early helps the next owner.
func (w *watchdog) lose(cause error, why string, r *renewal) {
	h := w.h
	c := h.st.c
	if !h.st.lose(h, cause) {
		r.settle()
		return
	}
	c.tel.leaseLost(h.Name, why)
	c.cfg.Logger.Warn("dlock: lease lost", "name", h.Name, "owner", h.Owner, "token", h.Token, "err", cause)
	r.settle()
	_ = c.release(h, releaseHow{})
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
	r.inFlight = nil
}

// refresh extends h on the server and moves its deadline. It returns by
// ctx's deadline whatever the backend call does.
func (c *Client) refresh(ctx context.Context, h *hold) error {
	sent := time.Now()
	renew := c.tel.renewal(h, func(ctx context.Context) error { return c.backend.Refresh(ctx, h.Hold) })
	_, err := read(c.caller, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, renew(ctx) })
	if err != nil {
		return err
	}
	h.st.extend(h, sent.Add(h.TTL-leaseMargin(h.TTL)))
	return nil
}

// Why a lease was lost, for telemetry (dlock.lease.lost's dlock.cause).
const (
	lostNotHeld  = "not_held" // the server says the hold is gone
	lostDeadline = "deadline" // no renewal confirmed it before its deadline
	lostSession  = "session"  // the backend reported it lost (driver.Grant.Lost)
)
