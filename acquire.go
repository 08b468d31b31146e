package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/wakeup"
)

// acquire takes h on the server. h is acquiring, so no other goroutine of
// this Client asks the server for h.Name meanwhile. Close of the Client
// ends the wait as ctx would.
func (c *Client) acquire(ctx context.Context, h *hold, wait bool) (Lease, error) {
	// Attempts run on the caller's goroutine as its own ctx allows: the
	// closable one cannot end much sooner on its own (Close ends it, and a
	// short attempt is not worth a worker for that).
	inline := c.caller.inline(ctx)
	ctx, stop := c.closable(ctx)
	defer stop()
	w := waiter{c: c, h: h, inline: inline, req: driver.Request{Name: h.Name, Owner: h.Owner, TTL: h.TTL, Wait: wait, Payload: h.payload}}
	defer w.unsubscribe()
	defer w.watchEnd(ctx)()
	if wait {
		w.subscribeLive()
	}
	for attempt := 0; ; attempt++ {
		sent := time.Now()
		g, err, pending := w.attempt(ctx)
		if err != nil {
			return nil, c.failed(ctx, &w, err, pending)
		}
		if g.Acquired && ctx.Err() != nil {
			// Granted in the attempt's grace, after its caller's ctx
			// ended: the caller is told no, so the grant goes back.
			w.late = true
			c.giveBack(w.req, g, nil, w.leaveWithin(ctx))
			return nil, c.failed(ctx, &w, errLate, false)
		}
		if g.Acquired {
			g, sent, err = c.settleGrant(ctx, h, g, sent)
			switch {
			case errors.Is(err, ErrNotHeld):
				w.unconfirmed = true
				continue // lost before it was confirmed: wait again
			case err != nil:
				return nil, c.failed(ctx, &w, err, false)
			}
			return leaseOrErr(c.grant(h, g, sent))
		}
		w.missed(g)
		if !wait {
			c.settle(h)
			return nil, w.tryFailed(g)
		}
		if err := w.sleep(ctx, attempt, g.RetryAfter); err != nil {
			return nil, c.failed(ctx, &w, err, false)
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

// confirm renews a hold granted as g and returns when the renewal was
// sent. If it fails other than with ErrNotHeld the grant is given back in
// the background.
func (c *Client) confirm(ctx context.Context, h *hold, g driver.Grant) (time.Time, error) {
	held := driver.Hold{Name: h.Name, Owner: h.Owner, Token: g.Token, TTL: h.TTL, Handle: g.Handle}
	sent := time.Now()
	_, err := read(c.caller, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, c.backend.Refresh(ctx, held)
	})
	if err != nil && !errors.Is(err, ErrNotHeld) {
		c.giveBack(driver.Request{Name: h.Name, Owner: h.Owner, TTL: h.TTL}, g, nil, 0)
	}
	return sent, err
}

// grant makes h held after a successful acquire sent at sent, and starts
// its watchdog. When Close ran while the acquire was in flight, the grant
// is given back and grant returns ErrClosed.
func (c *Client) grant(h *hold, g driver.Grant, sent time.Time) (*lease, error) {
	l, term := h.st.granted(h, g, sent)
	if l == nil {
		_ = c.release(h, releaseHow{})
		return nil, ErrClosed
	}
	h.dog.run(g.Lost, term)
	return l, nil
}

// closable returns ctx, also cancelled (with cause ErrClosed) when c is
// closed, so that a wait on the server ends with Close.
func (c *Client) closable(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	return ctx, func() { stop(); cancel(nil) }
}

// failed ends w's acquire, which did not succeed with err, and builds
// its error. What the attempt may have been granted is given back, and a
// waiting Lock leaves the server-side queue its attempts may have joined,
// within what is left of CancelMargin (see giveBack); pending says the
// attempt's outcome is still to come, and will be given back then.
func (c *Client) failed(ctx context.Context, w *waiter, err error, pending bool) error {
	h := w.h
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		// The deadline has passed, though ctx's timer may not have fired
		// yet: an inline call's own deadline, the same instant, can end
		// it first. The caller's Lock ended by its ctx, and says so.
		<-ctx.Done()
	}
	attemptFailed := !errors.Is(err, errSlept) && !errors.Is(err, errLate)
	var unknown error
	if attemptFailed && !pending {
		unknown = err
	}
	r := w.req
	r.Wait = r.Wait && w.queued()
	c.giveBack(r, driver.Grant{}, unknown, w.leaveWithin(ctx))
	c.settle(h)
	switch {
	case errors.Is(context.Cause(ctx), ErrClosed):
		return ErrClosed
	case ctx.Err() != nil && w.heldBack.Resume > 0 && !attemptFailed:
		return errjoin.Join(heldBackErr(h.Name, w.heldBack, w.heldBackAt), ctx.Err())
	case ctx.Err() != nil:
		return notAcquired(ctx, h.Name, w.why(err, attemptFailed, pending))
	case errors.Is(err, ErrNotAcquired):
		return err
	}
	return fmt.Errorf("dlock: acquire %q: %w", h.Name, err)
}

// why is what a Lock whose ctx ended says of why it did not get the
// name, from what its attempts heard; err is the last attempt's error,
// attemptFailed and pending as in failed.
func (w *waiter) why(err error, attemptFailed, pending bool) string {
	switch {
	case w.late:
		return grantedLate
	case w.unconfirmed:
		return unconfirmed
	case errors.Is(err, driver.ErrNoConnection):
		return "was not tried before ctx ended: " + err.Error()
	case attemptFailed && w.blocking && !pending && endedByCtx(err):
		return queuedEnd
	case attemptFailed:
		return noAnswer
	case w.heldBy:
		return byOwner
	case w.busy:
		return busyEnd
	}
	return byNobody
}

// missed records what an attempt that was not granted g heard.
func (w *waiter) missed(g driver.Grant) {
	w.heldBack, w.heldBackAt = g.HeldBack, time.Now()
	w.heldBy = w.heldBy || (!g.Busy && g.HeldBack.Resume == 0)
	w.busy = w.busy || g.Busy
}

// tryFailed is the error of a TryLock that was not granted g.
func (w *waiter) tryFailed(g driver.Grant) error {
	switch {
	case g.HeldBack.Resume > 0:
		return heldBackErr(w.h.Name, g.HeldBack, w.heldBackAt)
	case g.Busy:
		return fmt.Errorf("%w: %q %s", ErrNotAcquired, w.h.Name, busy)
	}
	return fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, w.h.Name)
}

// heldBackErr is the error of an attempt on name that a restarted server
// held back as hb says, heard at when.
func heldBackErr(name string, hb driver.HoldBack, when time.Time) error {
	resume := when.Add(hb.Resume)
	return fmt.Errorf("%w: %w: the server restarted %v ago and may have lost a hold of %q that its holder still believes it has: it grants the name again in %v (at %s)",
		ErrNotAcquired, ErrHeldBack, hb.Up.Round(time.Second), name, time.Until(resume).Round(time.Millisecond), resume.Format(time.RFC3339))
}

// endedByCtx reports whether err is a ctx's end, as a backend's wait in
// its server's queue returns it.
func endedByCtx(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// errSlept marks a wait between attempts that ctx ended; errLate, a
// grant that came after it.
var (
	errSlept = errors.New("dlock: the wait between attempts ended")
	errLate  = errors.New("dlock: granted after ctx ended")
)

// waiter is one acquire's state between attempts.
type waiter struct {
	c        *Client
	h        *hold
	req      driver.Request
	inline   bool                      // attempts run on the caller's goroutine (caller.inline)
	blocking bool                      // the backend queues waiters on the server
	pause    *wakeup.Waiter            // the pauses between attempts, once there was a miss
	ended    atomic.Pointer[time.Time] // when ctx ended; nil before
	heldBy   bool                      // an attempt's answer was that another owner holds the name
	busy     bool                      // an attempt was turned away for another one the server was deciding
	// heldBack is the last answer's hold-back by a restarted server
	// (zero for none), heard at heldBackAt.
	heldBack   driver.HoldBack
	heldBackAt time.Time
	tried      bool // an attempt was sent
	late       bool // the last attempt was granted after ctx ended (and given back)
	// unconfirmed says a grant ended before the renewal that was to
	// confirm it (settleGrant): round trips too slow for the TTL.
	unconfirmed bool
}

// queued reports whether an attempt of w may have joined a server-side
// queue, which a waiter that gives up leaves.
func (w *waiter) queued() bool { return w.tried }

// watchEnd records when ctx ends, from which leaveWithin counts, and
// returns what stops it.
func (w *waiter) watchEnd(ctx context.Context) (stop func() bool) {
	if ctx.Done() == nil {
		return func() bool { return false }
	}
	return context.AfterFunc(ctx, func() {
		now := time.Now()
		w.ended.Store(&now)
	})
}

// leaveWithin is how long a waiter that gives up may wait to give back
// what its attempts may hold: what is left of CancelMargin since its ctx
// ended (an attempt that ran on past ctx, in its grace or in the
// backend's own clean-up, has used some or all of it up), or all of it,
// less afterLeaving, kept for the work after it.
func (w *waiter) leaveWithin(ctx context.Context) time.Duration {
	margin := CancelMargin - afterLeaving
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return margin - time.Since(d) // ended by its deadline, maybe before watchEnd heard
	}
	if at := w.ended.Load(); at != nil {
		return margin - time.Since(*at)
	}
	return margin
}

// afterLeaving is the part of CancelMargin a waiter that gives up keeps
// for what follows giving back (forgetting its hold, waking the next in
// line, building the error), so that giving back on a slow server cannot
// spend the whole margin.
const afterLeaving = CancelMargin / 10

// attempt makes one attempt, a blocking one when the backend queues
// waiters. It returns by ctx's deadline (plus CancelMargin) whatever the
// backend call does; pending says its outcome is still to come, and is
// given back then.
func (w *waiter) attempt(ctx context.Context) (driver.Grant, error, bool) {
	call := w.c.backend.Acquire
	if b, ok := w.c.backend.(driver.Blocker); ok && w.req.Wait {
		w.blocking, call = true, b.AcquireWait
	}
	w.tried = true
	r := w.req
	actx, cancel := graced(ctx, attemptGrace)
	defer cancel()
	return within(w.c.caller, ctx, w.inline, attemptGrace+CancelMargin/4, func(context.Context) (driver.Grant, error) {
		return call(actx, r)
	}, func(g driver.Grant, err error) { w.c.giveBack(r, g, err, 0) })
}

// attemptGrace is how long an attempt's request may outlast its caller's
// ctx: a reply a moment late is read, and what it granted given back at
// once, rather than the request cut off with its outcome unknown (a
// connection closed midway, and a give-back that must open another).
const attemptGrace = CancelMargin / 2

// graced returns a ctx that ends grace after ctx does (at its deadline
// plus grace, or grace after its cancellation), with ctx's values.
func graced(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	g, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if d, ok := ctx.Deadline(); ok {
		var cancelD context.CancelFunc
		g, cancelD = context.WithDeadline(g, d.Add(grace))
		c := cancel
		cancel = func() { cancelD(); c() }
	}
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-g.Done():
		}
	})
	return g, func() { stop(); cancel() }
}

// sleep waits before the next attempt: for a push wake-up (subscribed on
// the first failed attempt, so an uncontended Lock pays no subscription),
// the backoff, or the holder's expiry, whichever is first.
func (w *waiter) sleep(ctx context.Context, attempt int, retryAfter time.Duration) error {
	if err := w.pauses().Sleep(ctx, attempt, retryAfter); err != nil {
		return fmt.Errorf("%w: %w", errSlept, err)
	}
	return nil
}

// pauses returns w.pause, made on first use.
func (w *waiter) pauses() *wakeup.Waiter {
	if w.pause == nil {
		w.pause = &wakeup.Waiter{Poll: w.c.cfg.Backoff, Fallback: w.c.cfg.PushFallback}
		if n, ok := w.c.backend.(driver.Notifier); ok {
			w.pause.Subscribe = func(ctx context.Context) (<-chan struct{}, func(), error) { return w.subscribe(ctx, n) }
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

// subscribe subscribes to w's wake-ups within ctx, whatever the
// backend's call does (a pub/sub connection that must be opened first,
// on a slow link, need not honour ctx): a subscription that comes after
// ctx ended is cancelled when it does.
func (w *waiter) subscribe(ctx context.Context, n driver.Notifier) (<-chan struct{}, func(), error) {
	type sub struct {
		wake   <-chan struct{}
		cancel func()
	}
	// Always on a worker: no backend promises its subscription keeps ctx
	// (driver.CancelBound speaks of its lock calls), and it follows a miss,
	// off the uncontended path.
	s, err, _ := within(w.c.caller, ctx, false, 0, func(ctx context.Context) (sub, error) {
		wake, cancel, err := n.Subscribe(ctx, w.req)
		return sub{wake, cancel}, err
	}, func(s sub, err error) {
		if err == nil && s.cancel != nil {
			s.cancel()
		}
	})
	return s.wake, s.cancel, err
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

// leaseMargin is how much earlier than the server's expiry the client's
// deadline comes, both counted from when the request that set the expiry
// was sent: 1% of the TTL plus 2 ms for clocks that run at slightly
// different rates (as Redlock's drift), and at least a tenth of the TTL,
// up to 100 ms, for a timer that fires late on a loaded machine (a 1 s
// TTL keeps 100 ms, where 1% + 2 ms left 12 ms); never more than half.
func leaseMargin(ttl time.Duration) time.Duration {
	d := max(ttl/100+2*time.Millisecond, min(ttl/10, 100*time.Millisecond))
	return min(d, ttl/2)
}
