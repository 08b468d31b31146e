package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock/internal/errjoin"
)

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
	l.err = errjoin.OneLine(err)
	delete(l.h.leases, l)
	close(l.done)
}

func (l *lease) Name() string          { return l.h.Name }
func (l *lease) Owner() string         { return l.h.Owner }
func (l *lease) Token() uint64         { return l.h.Token }
func (l *lease) Done() <-chan struct{} { return l.done }

func (l *lease) Deadline() time.Time {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	if l.err != nil {
		return time.Time{}
	}
	return l.h.deadline
}

func (l *lease) Err() error {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	return l.err
}

// ended returns the error for a call on a lease that has ended, or nil.
func (l *lease) ended() error {
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	if l.err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, l.err)
	}
	return nil
}

func (l *lease) Refresh(ctx context.Context) error { return errjoin.OneLine(l.refresh(ctx)) }

func (l *lease) refresh(ctx context.Context) error {
	if err := l.ended(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dlock: refresh %q: %w", l.h.Name, err)
	}
	err := l.c.refresh(ctx, l.h)
	if errors.Is(err, ErrNotHeld) {
		l.c.lose(l.h, err, lostNotHeld, func() {})
	}
	return err
}

func (l *lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		return errjoin.OneLine(l.unlock(ctx))
	}
	ctx, span := l.c.tel.unlockSpan(ctx)
	err := errjoin.OneLine(l.unlock(ctx))
	endSpan(span, err)
	return err
}

func (l *lease) unlock(ctx context.Context) error {
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
	measured := measuredEnd(h)
	h.cancel()
	// Most holds end before their watchdog started, and with nobody of
	// c waiting for the name: then the release is all there is to do.
	var quick bool
	select {
	case <-h.watched:
		quick = !c.handsOn(h)
	default:
	}
	c.mu.Unlock()
	c.tel.holdEnds(h.Name, &measured, "released")

	var result <-chan error
	switch {
	case quick && ctx.Err() == nil && c.boundsCalls():
		if done, err := c.releaseInline(ctx, h); done {
			return err
		}
		result = c.releaseAsync(h, true)
	case quick:
		result = c.releaseAsync(h, false)
	default:
		r := make(chan error, 1)
		c.background(func() {
			<-h.watched
			if handed, err := c.handOff(h); handed {
				r <- err
				return
			}
			r <- c.release(h)
		})
		result = r
	}
	if ctx.Err() == nil {
		select {
		case err := <-result:
			return err
		case <-ctx.Done():
		}
	}
	return fmt.Errorf("dlock: unlock %q: the release goes on in the background: %w", h.Name, ctx.Err())
}
