package dlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Client is the Locker every backend builds on: it turns a Backend's single
// attempts into waiting, re-entry, renewal and loss signalling. Backends
// embed it; users get it through a backend's New.
type Client struct {
	backend Backend
	cfg     Config

	mu       sync.Mutex
	holds    map[string]*hold
	closed   bool
	closedCh chan struct{}
	wg       sync.WaitGroup // watchdogs
}

var (
	_ Locker    = (*Client)(nil)
	_ Inspector = (*Client)(nil)
)

type holdState int

const (
	acquiring holdState = iota // one goroutine is taking the lock on the server
	held                       // leases exist; the watchdog runs
	ending                     // the server-side release is in flight
)

// hold is this Client's hold of one name on the server; its leases are the
// re-entries. Fields other than Hold are guarded by Client.mu.
type hold struct {
	Hold
	state    holdState
	waiting  bool          // acquiring by a Lock that waits for other owners
	settled  chan struct{} // closed when acquiring or ending finishes
	leases   map[*lease]struct{}
	deadline time.Time // monotonic: the lease is lost unless renewed by then
	ctx      context.Context
	cancel   context.CancelFunc // stops the watchdog
	watched  chan struct{}      // closed when the watchdog has exited
}

// NewClient returns a Client over b with the given options. It fails, with
// no I/O, on a nil backend or an invalid option.
func NewClient(b Backend, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, errors.New("dlock: nil Backend")
	}
	cfg, err := NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	return &Client{
		backend:  b,
		cfg:      cfg,
		holds:    make(map[string]*hold),
		closedCh: make(chan struct{}),
	}, nil
}

// Owner returns the owner id of this Client's locks.
func (c *Client) Owner() string { return c.cfg.Owner }

// Config returns the validated configuration.
func (c *Client) Config() Config { return c.cfg }

// Lock implements Locker.
func (c *Client) Lock(ctx context.Context, name string) (Lease, error) {
	return c.lock(ctx, name, true)
}

// TryLock implements Locker.
func (c *Client) TryLock(ctx context.Context, name string) (Lease, error) {
	return c.lock(ctx, name, false)
}

// Inspect implements Inspector when the backend does; otherwise it returns
// errors.ErrUnsupported.
func (c *Client) Inspect(ctx context.Context, name string) (Holder, bool, error) {
	if err := ValidateName(name); err != nil {
		return Holder{}, false, err
	}
	in, ok := c.backend.(Inspector)
	if !ok {
		return Holder{}, false, fmt.Errorf("dlock: inspect: %w", errors.ErrUnsupported)
	}
	return in.Inspect(ctx, name)
}

func (c *Client) lock(ctx context.Context, name string, wait bool) (Lease, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		h := c.holds[name]
		switch {
		case h == nil:
			h = &hold{
				Hold:    Hold{Name: name, Owner: c.cfg.Owner, TTL: c.cfg.TTL},
				state:   acquiring,
				waiting: wait,
				settled: make(chan struct{}),
			}
			c.holds[name] = h
			c.mu.Unlock()
			return c.acquire(ctx, h, wait)
		case h.state == held:
			l := h.newLease(c)
			c.mu.Unlock()
			return l, nil
		case h.state == acquiring && h.waiting && !wait:
			// Another goroutine of this owner waits for another owner:
			// TryLock must not wait with it.
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, name)
		}
		settled := h.settled
		c.mu.Unlock()
		select {
		case <-settled:
		case <-ctx.Done():
			return nil, errors.Join(ErrNotAcquired, ctx.Err())
		}
	}
}

// acquire takes h on the server. h is in the acquiring state, so no other
// goroutine of this Client touches the server for h.Name meanwhile.
func (c *Client) acquire(ctx context.Context, h *hold, wait bool) (_ Lease, err error) {
	subscribed := func() {}
	defer func() { subscribed() }()
	req := Request{Name: h.Name, Owner: h.Owner, TTL: h.TTL, Wait: wait}
	// A push-capable backend is subscribed to only once the first attempt
	// found the name taken (an uncontended Lock pays no subscription);
	// the attempt after subscribing comes at once, so a release between
	// the first attempt and the subscription is not missed.
	notifier, pushes := c.backend.(Notifier)
	pushes = pushes && wait
	var wake <-chan struct{}
	subscribe := func() error {
		w, cancel, err := notifier.Subscribe(ctx, h.Name)
		switch {
		case err == nil:
			wake = w
			subscribed = cancel
		case ctx.Err() != nil:
			return errors.Join(ErrNotAcquired, ctx.Err(), err)
		default:
			pushes = false
			c.cfg.Logger.Warn("dlock: no push wake-ups, polling instead", "name", h.Name, "err", err)
		}
		return nil
	}
	blocker, blocking := c.backend.(Blocker)
	blocking = blocking && wait

	for attempt := 0; ; attempt++ {
		sent := time.Now()
		var (
			g   Grant
			err error
		)
		if blocking {
			g, err = blocker.AcquireWait(ctx, req)
		} else {
			g, err = c.backend.Acquire(ctx, req)
		}
		if err != nil {
			c.abandon(h)
			if ctx.Err() != nil {
				return nil, errors.Join(ErrNotAcquired, ctx.Err(), err)
			}
			return nil, fmt.Errorf("dlock: acquire %q: %w", h.Name, err)
		}
		if g.Acquired && blocking && time.Since(sent) > h.TTL/3 {
			// A blocking wait: the server may have granted the lock at any
			// time since sent, so the hold's TTL on the server began at an
			// unknown point after it. Renew once and count from there, or
			// a long wait would hand over a lease already past its deadline.
			var err error
			if sent, err = c.confirm(ctx, h, g); err != nil {
				if errors.Is(err, ErrNotHeld) {
					continue // lost in between: wait again
				}
				c.abandon(h)
				return nil, fmt.Errorf("dlock: acquire %q: confirming the grant: %w", h.Name, err)
			}
		}
		if g.Acquired {
			return c.grant(h, g, sent)
		}
		if !wait {
			c.abandon(h)
			return nil, fmt.Errorf("%w: %q is held by another owner", ErrNotAcquired, h.Name)
		}
		if pushes && wake == nil {
			if err := subscribe(); err != nil {
				c.abandon(h)
				return nil, err
			}
			if wake != nil {
				continue
			}
		}

		delay := c.cfg.Backoff(attempt)
		if wake != nil {
			delay = c.cfg.PushFallback
		}
		if g.RetryAfter > 0 && g.RetryAfter+time.Millisecond < delay {
			// Wake when the holder's lease runs out on the server, in
			// case it died without releasing.
			delay = g.RetryAfter + time.Millisecond
		}
		timer := time.NewTimer(delay)
		select {
		case <-wake:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			c.abandon(h)
			return nil, errors.Join(ErrNotAcquired, ctx.Err())
		case <-c.closedCh:
			timer.Stop()
			c.abandon(h)
			return nil, ErrClosed
		}
		timer.Stop()
	}
}

// confirm renews a hold granted by a blocking wait and returns when the
// renewal was sent. If it fails other than with ErrNotHeld it gives the
// hold back.
func (c *Client) confirm(ctx context.Context, h *hold, g Grant) (time.Time, error) {
	held := Hold{Name: h.Name, Owner: h.Owner, Token: g.Token, TTL: h.TTL, Handle: g.Handle}
	sent := time.Now()
	err := c.backend.Refresh(ctx, held)
	if err != nil && !errors.Is(err, ErrNotHeld) {
		rctx, cancel := context.WithTimeout(context.Background(), DefaultReleaseTimeout)
		if rerr := c.backend.Release(rctx, held); rerr != nil && !errors.Is(rerr, ErrNotHeld) {
			c.cfg.Logger.Warn("dlock: giving back an unconfirmed grant failed; it expires on the server", "name", h.Name, "err", rerr)
		}
		cancel()
	}
	return sent, err
}

// abandon forgets h after an acquire that did not succeed, and takes a
// waiter out of a server-side queue.
func (c *Client) abandon(h *hold) {
	if l, ok := c.backend.(Leaver); ok && h.waiting {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultReleaseTimeout)
		if err := l.Leave(ctx, Request{Name: h.Name, Owner: h.Owner, TTL: h.TTL, Wait: true}); err != nil {
			c.cfg.Logger.Warn("dlock: leaving the wait queue failed; the entry times out", "name", h.Name, "err", err)
		}
		cancel()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds[h.Name] == h {
		delete(c.holds, h.Name)
	}
	close(h.settled)
}

// grant makes h held after a successful acquire sent at sent.
func (c *Client) grant(h *hold, g Grant, sent time.Time) (Lease, error) {
	c.mu.Lock()
	h.Token = g.Token
	h.Handle = g.Handle
	h.state = held
	h.deadline = sent.Add(h.TTL - drift(h.TTL))
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.watched = make(chan struct{})
	h.leases = make(map[*lease]struct{})
	l := h.newLease(c)
	close(h.settled)
	if c.closed {
		// Close ran while this acquire was in flight.
		l.end(ErrClosed)
		close(h.watched)
		c.mu.Unlock()
		c.endHold(h, ErrClosed)
		return nil, ErrClosed
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go c.watch(h, g.Lost)
	return l, nil
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

// watch renews h every TTL/3 (when auto-renewal is on) and ends it when its
// deadline passes unconfirmed, the server says it is gone, or the backend
// reports the hold lost.
//
// A refresh in flight is never cancelled by Unlock: Unlock stops the
// watchdog and waits for it, so a release never overlaps a refresh (on a
// pinned connection, cancelling a statement can end the session).
func (c *Client) watch(h *hold, lost <-chan error) {
	defer c.wg.Done()
	defer close(h.watched)
	interval := h.TTL / 3
	var renewC <-chan time.Time
	var renew *time.Timer
	if c.cfg.AutoRenew {
		renew = time.NewTimer(interval)
		defer renew.Stop()
		renewC = renew.C
	}
	var lastErr error
	failures := 0
	for {
		c.mu.Lock()
		deadline := h.deadline
		c.mu.Unlock()
		expire := time.NewTimer(time.Until(deadline))
		select {
		case <-h.ctx.Done():
			expire.Stop()
			return
		case err := <-lost:
			expire.Stop()
			c.lose(h, err)
			return
		case <-expire.C:
			c.mu.Lock()
			extended := time.Now().Before(h.deadline)
			c.mu.Unlock()
			if extended {
				continue
			}
			cause := lastErr
			if cause == nil {
				cause = errors.New("lease expired before it was renewed")
			}
			c.lose(h, fmt.Errorf("renewal not confirmed within the TTL: %w", cause))
			return
		case <-renewC:
			expire.Stop()
			ctx, cancel := context.WithDeadline(context.Background(), deadline)
			err := c.refresh(ctx, h)
			cancel()
			switch {
			case h.ctx.Err() != nil:
				return
			case err == nil:
				failures, lastErr = 0, nil
				renew.Reset(interval)
			case errors.Is(err, ErrNotHeld):
				c.lose(h, err)
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

// refresh extends h on the server and moves its deadline.
func (c *Client) refresh(ctx context.Context, h *hold) error {
	sent := time.Now()
	if err := c.backend.Refresh(ctx, h.Hold); err != nil {
		return err
	}
	c.mu.Lock()
	if d := sent.Add(h.TTL - drift(h.TTL)); h.state == held && d.After(h.deadline) {
		h.deadline = d
	}
	c.mu.Unlock()
	return nil
}

// lose ends h because it was lost; its leases' Err wrap ErrLost and cause.
func (c *Client) lose(h *hold, cause error) {
	err := fmt.Errorf("%w: %q: %w", ErrLost, h.Name, cause)
	c.mu.Lock()
	if h.state != held {
		c.mu.Unlock()
		return
	}
	for l := range h.leases {
		l.end(err)
	}
	c.mu.Unlock()
	c.cfg.Logger.Warn("dlock: lease lost", "name", h.Name, "owner", h.Owner, "token", h.Token, "err", cause)
	c.endHold(h, err)
}

// endHold stops h's watchdog and releases h on the server (best effort, the
// release checks the token so it cannot touch a newer hold): a lost lease
// may still be live on the server, and freeing it early helps the next
// owner. New locks of the name by this Client wait for it.
func (c *Client) endHold(h *hold, why error) {
	c.mu.Lock()
	if h.state == ending {
		c.mu.Unlock()
		return
	}
	h.state = ending
	h.settled = make(chan struct{})
	h.cancel()
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), min(DefaultReleaseTimeout, h.TTL))
	err := c.backend.Release(ctx, h.Hold)
	cancel()
	if err != nil && !errors.Is(err, ErrNotHeld) {
		c.releaseLater(h, fmt.Errorf("after the lease ended (%w): %w", why, err))
		return
	}
	c.settle(h)
}

// settle forgets h once its release finished.
func (c *Client) settle(h *hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds[h.Name] == h {
		delete(c.holds, h.Name)
	}
	close(h.settled)
}

// Close ends every lease of this Client (their Err is ErrClosed), releases
// their locks on the server and makes later calls return ErrClosed. ctx
// governs the releases. Close does not close the connections or clients the
// backend was given: they belong to the caller.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closedCh)
	var ended []*hold
	for _, h := range c.holds {
		if h.state != held {
			continue
		}
		for l := range h.leases {
			l.end(ErrClosed)
		}
		h.state = ending
		h.settled = make(chan struct{})
		h.cancel()
		ended = append(ended, h)
	}
	c.mu.Unlock()

	var errs []error
	for _, h := range ended {
		<-h.watched
		if err := c.backend.Release(ctx, h.Hold); err != nil && !errors.Is(err, ErrNotHeld) {
			errs = append(errs, fmt.Errorf("dlock: release %q: %w", h.Name, err))
		}
		c.settle(h)
	}
	c.wg.Wait()
	return errors.Join(errs...)
}

// lease is one Lock or TryLock of a hold.
type lease struct {
	c    *Client
	h    *hold
	done chan struct{}
	err  error // guarded by c.mu
}

var _ Lease = (*lease)(nil)

// newLease adds a lease to h. c.mu must be held.
func (h *hold) newLease(c *Client) *lease {
	l := &lease{c: c, h: h, done: make(chan struct{})}
	h.leases[l] = struct{}{}
	return l
}

// end ends l with err. c.mu must be held.
func (l *lease) end(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	delete(l.h.leases, l)
	close(l.done)
}

func (l *lease) Name() string          { return l.h.Name }
func (l *lease) Owner() string         { return l.h.Owner }
func (l *lease) Token() uint64         { return l.h.Token }
func (l *lease) Done() <-chan struct{} { return l.done }

func (l *lease) Err() error {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.err
}

func (l *lease) Refresh(ctx context.Context) error {
	c, h := l.c, l.h
	c.mu.Lock()
	if l.err != nil {
		err := l.err
		c.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	c.mu.Unlock()
	err := c.refresh(ctx, h)
	if errors.Is(err, ErrNotHeld) {
		c.lose(h, err)
	}
	return err
}

func (l *lease) Unlock(ctx context.Context) error {
	c, h := l.c, l.h
	c.mu.Lock()
	if l.err != nil {
		err := l.err
		c.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	l.end(ErrUnlocked)
	if len(h.leases) > 0 || h.state != held {
		c.mu.Unlock()
		return nil
	}
	h.state = ending
	h.settled = make(chan struct{})
	h.cancel()
	c.mu.Unlock()

	<-h.watched
	err := c.backend.Release(ctx, h.Hold)
	if err != nil && !errors.Is(err, ErrNotHeld) {
		c.releaseLater(h, err)
		return fmt.Errorf("dlock: release %q (retrying in the background): %w", h.Name, err)
	}
	c.settle(h)
	if err != nil {
		return fmt.Errorf("dlock: release %q: %w", h.Name, err)
	}
	return nil
}

// releaseLater retries the release of h in the background after one whose
// outcome is unknown (the server unreachable, the reply lost), until it
// succeeds, the server says h is gone, a TTL has passed since h's deadline
// (a TTL-bound hold has expired by then), or c is closed; then it settles h.
// Until then a Lock of h.Name by c waits: it would otherwise re-enter the
// hold left on the server, which keeps the old token and, on backends
// whose holds end only with a session, never expires.
func (c *Client) releaseLater(h *hold, first error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.settle(h)
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	c.cfg.Logger.Warn("dlock: release failed; retrying", "name", h.Name, "token", h.Token, "err", first)
	c.mu.Lock()
	giveUp := time.Until(h.deadline) + h.TTL
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		defer c.settle(h)
		expired := time.NewTimer(giveUp)
		defer expired.Stop()
		for attempt := 0; ; attempt++ {
			timer := time.NewTimer(c.cfg.Backoff(attempt))
			select {
			case <-timer.C:
			case <-expired.C:
				timer.Stop()
				return
			case <-c.closedCh:
				timer.Stop()
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), min(DefaultReleaseTimeout, h.TTL))
			err := c.backend.Release(ctx, h.Hold)
			cancel()
			if err == nil || errors.Is(err, ErrNotHeld) {
				return
			}
		}
	}()
}
