package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/wakeup"
)

// acquire takes h on the server. h is in the acquiring state, so no other
// goroutine of this Client touches the server for h.Name meanwhile. Close
// of the Client ends the wait as ctx would.
func (c *Client) acquire(ctx context.Context, h *hold, wait bool) (Lease, error) {
	ctx, stop := c.closable(ctx)
	defer stop()
	w := waiter{c: c, h: h, req: driver.Request{Name: h.Name, Owner: h.Owner, TTL: h.TTL, Wait: wait, Payload: h.payload}}
	defer w.unsubscribe()
	if wait {
		defer w.watchEnd(ctx)()
		w.subscribeLive()
	}
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		g, err := w.attempt(ctx)
		if err != nil {
			return nil, c.failed(ctx, &w, err)
		}
		if g.Acquired {
			g, sent, err = c.settleGrant(ctx, h, g, sent)
			switch {
			case errors.Is(err, ErrNotHeld):
				continue // lost before it was confirmed: wait again
			case err != nil:
				return nil, c.failed(ctx, &w, err)
			}
			return c.grant(h, g, sent)
		}
		if !wait {
			c.abandon(h, false, 0)
			return nil, fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, h.Name)
		}
		if err := w.sleep(ctx, attempt, g.RetryAfter); err != nil {
			return nil, c.failed(ctx, &w, err)
		}
	}
}

// settleGrant returns g and when its lease counts from: when the attempt
// was sent (or, for a grant the server made on the waiter's behalf,
// before it), or, for a grant it cannot date safely, after a renewal that
// confirms it (the grant's term then is the TTL). An error wrapping
// ErrNotHeld says the hold was lost before it could be confirmed.
func (c *Client) settleGrant(ctx context.Context, h *hold, g driver.Grant, sent time.Time) (driver.Grant, time.Time, error) {
	if !g.Since.IsZero() && g.Since.Before(sent) {
		sent = g.Since // granted on the waiter's behalf, before this attempt
	}
	if term := termOf(h, g); time.Since(sent) <= confirmAfter(g, term) && (term >= h.TTL || c.cfg.AutoRenew) {
		return g, sent, nil
	}
	// A slow grant (a wait in the server's queue, or a request that hung
	// on a frozen server or a slow link): the server may have granted the
	// lock at any time since sent, so its TTL there began at an unknown
	// point after it, and the client's deadline, counted from sent, may
	// already have passed. Or a first term shorter than the TTL, with no
	// watchdog to renew within it. Renew once and count the TTL from
	// there, or Lock would hand over a lease that is lost on arrival.
	from, err := c.confirm(ctx, h, g)
	switch {
	case errors.Is(err, ErrNotHeld):
		return g, from, err
	case err != nil:
		return g, from, fmt.Errorf("confirming the grant: %w", err)
	}
	g.Term = 0
	return g, from, nil
}

// closable returns ctx, also cancelled (with cause ErrClosed) when c is
// closed, so that a wait on the server ends with Close.
func (c *Client) closable(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return ctx, func() { stop(); cancel(nil) }
}

// failed ends w's acquire, which did not succeed, and builds its error. A
// waiting Lock leaves the server-side queue its attempts may have joined,
// within what is left of CancelMargin (see abandon); a TryLock joined
// none (driver.Request.Wait).
func (c *Client) failed(ctx context.Context, w *waiter, err error) error {
	h := w.h
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		// The deadline has passed, though ctx's timer may not have fired
		// yet: an inline call's own deadline, the same instant, can end
		// it first. The caller's Lock ended by its ctx, and says so.
		<-ctx.Done()
	}
	c.abandon(h, w.req.Wait, w.leaveWithin())
	switch {
	case errors.Is(context.Cause(ctx), ErrClosed):
		return ErrClosed
	case ctx.Err() != nil:
		return notAcquired(ctx, h.Name, byOwner)
	case errors.Is(err, ErrNotAcquired):
		return err
	}
	return fmt.Errorf("dlock: acquire %q: %w", h.Name, err)
}

// waiter is one acquire's state between attempts.
type waiter struct {
	c        *Client
	h        *hold
	req      driver.Request
	blocking bool                      // the backend queues waiters on the server
	pause    *wakeup.Waiter            // the pauses between attempts, once there was a miss
	ended    atomic.Pointer[time.Time] // when ctx ended, for a Leaver backend; nil before
}

// watchEnd records when ctx ends, for a backend with a queue to leave
// (driver.Leaver), and returns what stops it.
func (w *waiter) watchEnd(ctx context.Context) (stop func() bool) {
	if _, ok := w.c.backend.(driver.Leaver); !ok {
		return func() bool { return false }
	}
	return context.AfterFunc(ctx, func() {
		now := time.Now()
		w.ended.Store(&now)
	})
}

// leaveWithin is how long a waiter that gives up may wait to leave the
// server's queue: what is left of CancelMargin since its ctx ended (an
// attempt that hung past ctx has used it up), or all of it, less
// afterLeaving, kept for the work after it.
func (w *waiter) leaveWithin() time.Duration {
	margin := CancelMargin - afterLeaving
	if at := w.ended.Load(); at != nil {
		return margin - time.Since(*at)
	}
	return margin
}

// afterLeaving is the part of CancelMargin a waiter that gives up keeps
// for what follows leaving the server's queue (forgetting its hold,
// waking the next in line, building the error), so that leaving a queue
// on a slow server cannot spend the whole margin.
const afterLeaving = CancelMargin / 4

// attempt makes one attempt, a blocking one when the backend queues
// waiters. It returns by ctx's deadline whatever the backend call does; a
// call still running then is cleaned up when it returns (see cleanup).
func (w *waiter) attempt(ctx context.Context) (driver.Grant, error) {
	call := w.c.backend.Acquire
	if b, ok := w.c.backend.(driver.Blocker); ok && w.req.Wait {
		w.blocking, call = true, b.AcquireWait
	}
	if w.c.boundsCalls() {
		if w.blocking {
			return w.c.waitInline(ctx, w.req, call)
		}
		if g, ok, err := w.c.callInline(ctx, w.req, call); ok {
			return g, err
		}
	}
	return w.c.call(ctx, w.req, call)
}

// sleep waits before the next attempt: for a push wake-up (subscribed on
// the first failed attempt, so an uncontended Lock pays no subscription),
// the backoff, or the holder's expiry, whichever is first.
func (w *waiter) sleep(ctx context.Context, attempt int, retryAfter time.Duration) error {
	return w.pauses().Sleep(ctx, attempt, retryAfter)
}

// pauses returns w.pause, made on first use.
func (w *waiter) pauses() *wakeup.Waiter {
	if w.pause == nil {
		w.pause = &wakeup.Waiter{Poll: w.c.cfg.Backoff, Fallback: w.c.cfg.PushFallback}
		if n, ok := w.c.backend.(driver.Notifier); ok {
			w.pause.Subscribe = func(ctx context.Context) (<-chan struct{}, func(), error) { return n.Subscribe(ctx, w.req) }
			w.pause.NoPush = func(err error) error {
				if !errors.Is(err, errors.ErrUnsupported) { // this server or driver cannot push: poll
					w.c.cfg.Logger.Warn("dlock: no push wake-ups, polling instead", "name", w.req.Name, "err", err)
				}
				return nil
			}
		}
	}
	return w.pause
}

// subscribeLive subscribes before the first attempt where that needs no
// I/O (driver.LiveNotifier), so a miss waits for its wake-up at once.
func (w *waiter) subscribeLive() {
	n, ok := w.c.backend.(driver.LiveNotifier)
	if !ok {
		return
	}
	if wake, cancel, ok := n.SubscribeLive(w.req); ok {
		w.pauses().Subscribed(wake, cancel)
	}
}

func (w *waiter) unsubscribe() {
	if w.pause != nil {
		w.pause.Close()
	}
}

// confirm renews a hold granted by a blocking wait and returns when the
// renewal was sent. If it fails other than with ErrNotHeld the hold is
// given back in the background.
func (c *Client) confirm(ctx context.Context, h *hold, g driver.Grant) (time.Time, error) {
	held := driver.Hold{Name: h.Name, Owner: h.Owner, Token: g.Token, TTL: h.TTL, Handle: g.Handle}
	sent := time.Now()
	_, _, err := withinCtx(ctx, c.workers, func(ctx context.Context) (struct{}, struct{}, error) {
		return struct{}{}, struct{}{}, c.backend.Refresh(ctx, held)
	})
	if err != nil && !errors.Is(err, ErrNotHeld) {
		c.releaseLater(&hold{Hold: held, gone: make(chan struct{})}, err)
	}
	return sent, err
}

// abandon forgets h after an acquire that did not succeed and, for a
// waiter that gave up, takes it out of a server-side queue. The caller's
// ctx may have ended, so leaving runs in the background; abandon waits
// for it up to within, so that a Lock that gave up returns with nothing
// granted to it on the server (a release may grant the lock to the head
// of the queue on its behalf) unless the server is slow to answer.
func (c *Client) abandon(h *hold, gaveUp bool, within time.Duration) {
	if l, ok := c.backend.(driver.Leaver); ok && gaveUp {
		r := driver.Request{Name: h.Name, Owner: h.Owner, TTL: h.TTL, Wait: true, Payload: h.payload}
		left := make(chan struct{})
		c.background(func() {
			defer close(left)
			ctx, cancel := context.WithTimeout(context.Background(), DefaultReleaseTimeout)
			defer cancel()
			if err := l.Leave(ctx, r); err != nil {
				c.cfg.Logger.Warn("dlock: leaving the wait queue failed; the entry times out", "name", h.Name, "err", err)
			}
		})
		if within > 0 {
			margin := time.NewTimer(within)
			select {
			case <-left:
			case <-margin.C:
			}
			margin.Stop()
		}
	}
	c.settle(h)
}

// grant makes h held after a successful acquire sent at sent.
func (c *Client) grant(h *hold, g driver.Grant, sent time.Time) (Lease, error) {
	measured := c.tel.holdStarts(h.Name, g.Token) // outside c.mu (see measuredEnd)
	c.mu.Lock()
	h.Token = g.Token
	h.Handle = g.Handle
	h.state = held
	h.measured = measured
	term := termOf(h, g)
	h.deadline = sent.Add(term - drift(term))
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.watched = make(chan struct{})
	h.leases = make(map[*lease]struct{})
	l := h.newLease(c)
	if c.closed {
		// Close ran while this acquire was in flight.
		l.end(ErrClosed)
		h.state = ending
		m := measuredEnd(h)
		h.cancel()
		close(h.watched)
		c.mu.Unlock()
		c.tel.holdEnds(h.Name, &m, "closed")
		c.releaseLater(h, nil)
		return nil, ErrClosed
	}
	c.wg.Add(1)
	if g.Lost != nil {
		c.mu.Unlock()
		go c.watch(h, g.Lost, h.TTL/3)
		return l, nil
	}
	// Most holds end before their first renewal is due, so the watchdog's
	// goroutine starts only then (a third into the term, or halfway to a
	// nearer deadline: a grant on the waiter's behalf may come late in
	// its term), and renews at once. A hold that ends before never
	// starts it.
	start := time.AfterFunc(min(term/3, time.Until(h.deadline)/2), func() { c.watch(h, nil, 0) })
	cancel := h.cancel
	h.cancel = func() {
		cancel()
		if start.Stop() {
			close(h.watched)
			c.wg.Done()
		}
	}
	c.mu.Unlock()
	return l, nil
}

// confirmAfter is how old a grant of term may be before it is confirmed
// with a renewal. An attempt's own grant is suspect after a third of it:
// the request hung. A grant on the waiter's behalf (driver.Grant.Since)
// is as old as the wait that preceded it; it is renewed only when less
// than a third of its term is left.
func confirmAfter(g driver.Grant, term time.Duration) time.Duration {
	if g.Since.IsZero() {
		return term / 3
	}
	return term * 2 / 3
}

// termOf is how long the server granted h for in g: its TTL, or a
// shorter first term the backend reports (driver.Grant.Term).
func termOf(h *hold, g driver.Grant) time.Duration {
	if g.Term > 0 && g.Term < h.TTL {
		return g.Term
	}
	return h.TTL
}

// drift is the margin by which the client's deadline precedes the server's
// expiry, for clocks that run at slightly different rates (as Redlock).
func drift(ttl time.Duration) time.Duration {
	d := ttl/100 + 2*time.Millisecond
	if d >= ttl/2 {
		d = ttl / 2
	}
	return d
}
