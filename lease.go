package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock/internal/errjoin"
)

var _ Lease = (*lease)(nil)

func (l *lease) Name() string          { return l.h.Name }
func (l *lease) Owner() string         { return l.h.Owner }
func (l *lease) Token() uint64         { return l.h.Token }
func (l *lease) Done() <-chan struct{} { return l.done }
func (l *lease) Deadline() time.Time   { return l.h.st.leaseDeadline(l) }
func (l *lease) Err() error            { return l.h.st.leaseErr(l) }

// client is the Client l was granted by.
func (l *lease) client() *Client { return l.h.st.c }

func (l *lease) Refresh(ctx context.Context) error { return errjoin.OneLine(l.refresh(ctx)) }

func (l *lease) refresh(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("dlock: refresh %q: %w", l.h.Name, err)
	}
	c := l.client()
	err := c.refresh(ctx, l.h)
	if errors.Is(err, ErrNotHeld) && l.h.st.lose(l.h, err) {
		c.tel.leaseLost(l.h.Name, lostNotHeld)
		c.cfg.Logger.Warn("dlock: lease lost", "name", l.h.Name, "owner", l.h.Owner, "token", l.h.Token, "err", err)
		_ = c.release(l.h, releaseHow{})
	}
	return err
}

func (l *lease) Unlock(ctx context.Context) error {
	if ctx == nil {
		return errors.New("dlock: Unlock: nil Context")
	}
	ctx, span := l.client().tel.unlockSpan(ctx)
	err := errjoin.OneLine(l.unlock(ctx))
	endSpan(span, err)
	return err
}

func (l *lease) unlock(ctx context.Context) error {
	last, err := l.h.st.unlock(l)
	if err != nil || last == nil {
		return err
	}
	return l.client().release(last, releaseHow{wait: ctx, handOn: true})
}
