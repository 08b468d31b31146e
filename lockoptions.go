package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlockhq/dlock/driver"
)

// MaxPayloadLen is the longest payload (WithPayload), in bytes.
const MaxPayloadLen = 256

// LockOption sets one Lock or TryLock call apart from its Locker's
// configuration: see LockWith. The Locker interface takes none, so code
// written against it is unchanged.
type LockOption func(*lockCall)

// LockTTL sets the lease time of this call's hold, instead of the Locker's
// (WithTTL): at least MinTTL, at most the backend's MaxTTL. A call that
// re-enters a hold its chain has keeps that hold's TTL.
func LockTTL(d time.Duration) LockOption {
	return func(c *lockCall) { c.ttl, c.ttlSet = d, true }
}

// WaitAtMost bounds how long a Lock waits, on top of its ctx: when the
// name is not granted within d, Lock fails with an error wrapping
// ErrNotAcquired and context.DeadlineExceeded, and leaves nothing held,
// as when ctx ends. 0 means no wait at all beyond one attempt, as
// TryLock. TryLock never waits and refuses it.
func WaitAtMost(d time.Duration) LockOption {
	return func(c *lockCall) { c.maxWait, c.waitSet = d, true }
}

// WithPayload stores a short text with the hold on the server: who holds
// it and why ("deploy #4312 by alice"). Inspect, List and `dlock ls` show
// it while the hold lasts. At most MaxPayloadLen bytes of printable
// UTF-8. Only backends that keep a payload (driver.PayloadKeeper) accept
// it; the others refuse the call before any I/O. A call that re-enters a
// hold its chain has keeps that hold's payload.
func WithPayload(p string) LockOption {
	return func(c *lockCall) { c.payload, c.payloadSet = p, true }
}

// OptionLocker is a Locker whose calls take LockOptions. Every Locker
// built on Client is one.
type OptionLocker interface {
	Locker
	// LockWith is Lock with opts applied to this call.
	LockWith(ctx context.Context, name string, opts ...LockOption) (Lease, error)
	// TryLockWith is TryLock with opts applied to this call.
	TryLockWith(ctx context.Context, name string, opts ...LockOption) (Lease, error)
}

var _ OptionLocker = (*Client)(nil)

// LockWith calls l.LockWith when l is an OptionLocker, and l.Lock when no
// option is given; otherwise it fails before any I/O.
func LockWith(ctx context.Context, l Locker, name string, opts ...LockOption) (Lease, error) {
	return lockWith(ctx, l, name, opts, OptionLocker.LockWith, Locker.Lock)
}

// TryLockWith is LockWith for TryLock.
func TryLockWith(ctx context.Context, l Locker, name string, opts ...LockOption) (Lease, error) {
	return lockWith(ctx, l, name, opts, OptionLocker.TryLockWith, Locker.TryLock)
}

// lockWith is LockWith and TryLockWith: with the call, or plain without
// options.
func lockWith(ctx context.Context, l Locker, name string, opts []LockOption,
	with func(OptionLocker, context.Context, string, ...LockOption) (Lease, error),
	plain func(Locker, context.Context, string) (Lease, error)) (Lease, error) {
	if ol, ok := l.(OptionLocker); ok {
		return with(ol, ctx, name, opts...)
	}
	if len(opts) > 0 {
		return nil, fmt.Errorf("dlock: %T takes no LockOptions (it is not an OptionLocker)", l)
	}
	return plain(l, ctx, name)
}

// LockWith implements OptionLocker: Lock with opts applied to this call.
// A bad option fails before any I/O.
func (c *Client) LockWith(ctx context.Context, name string, opts ...LockOption) (Lease, error) {
	call, err := c.newLockCall(name, true, opts)
	if err != nil {
		return nil, err
	}
	return c.measuredLock(ctx, call)
}

// TryLockWith implements OptionLocker: TryLock with opts applied to this
// call. A bad option fails before any I/O.
func (c *Client) TryLockWith(ctx context.Context, name string, opts ...LockOption) (Lease, error) {
	call, err := c.newLockCall(name, false, opts)
	if err != nil {
		return nil, err
	}
	return c.measuredLock(ctx, call)
}

// lockCall is one Lock or TryLock: the name, whether it waits, and the
// settings of the hold it takes when it does not re-enter one.
type lockCall struct {
	name    string
	wait    bool
	ttl     time.Duration
	payload string
	// maxWait bounds the wait when waitSet.
	maxWait time.Duration

	ttlSet, waitSet, payloadSet bool
}

// plainCall is a Lock or TryLock of name with c's settings.
func (c *Client) plainCall(name string, wait bool) *lockCall {
	return &lockCall{name: name, wait: wait, ttl: c.cfg.TTL}
}

// newLockCall applies opts to a call of name and checks the result.
func (c *Client) newLockCall(name string, wait bool, opts []LockOption) (*lockCall, error) {
	call := c.plainCall(name, wait)
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("dlock: nil LockOption")
		}
		o(call)
	}
	if call.ttlSet {
		if call.ttl < MinTTL {
			return nil, fmt.Errorf("dlock: LockTTL %v is shorter than MinTTL (%v)", call.ttl, MinTTL)
		}
		if limit := maxTTL(c.backend); call.ttl > limit {
			return nil, fmt.Errorf("dlock: LockTTL %v is longer than %v, the longest the backend's server keeps a lease", call.ttl, limit)
		}
	}
	if call.waitSet {
		if !wait {
			return nil, errors.New("dlock: WaitAtMost given to TryLock, which never waits")
		}
		if call.maxWait < 0 {
			return nil, fmt.Errorf("dlock: WaitAtMost %v is negative", call.maxWait)
		}
		if call.maxWait == 0 {
			call.wait, call.waitSet = false, false // one attempt: TryLock
		}
	}
	if call.payloadSet {
		if err := c.checkPayload(call.payload); err != nil {
			return nil, err
		}
	}
	return call, nil
}

// checkPayload checks p for WithPayload.
func (c *Client) checkPayload(p string) error {
	if pk, ok := c.backend.(driver.PayloadKeeper); !ok || !pk.KeepsPayload() {
		return fmt.Errorf("dlock: WithPayload: the backend (%s) keeps no payload with a hold: %w", c.Identity(), errors.ErrUnsupported)
	}
	return ValidatePayload(p)
}

// ValidatePayload returns an error unless p is a payload every backend
// that keeps one stores as it is (see WithPayload): at most MaxPayloadLen
// bytes of printable UTF-8. "" (no payload) is valid.
func ValidatePayload(p string) error {
	switch {
	case len(p) > MaxPayloadLen:
		return fmt.Errorf("dlock: WithPayload: %d bytes, the limit is %d", len(p), MaxPayloadLen)
	case !utf8.ValidString(p):
		return errors.New("dlock: WithPayload: not valid UTF-8")
	}
	for _, r := range p {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("dlock: WithPayload: unprintable character %q", r)
		}
	}
	return nil
}

// bounded returns ctx bounded by the call's wait limit, if any.
func (call *lockCall) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if !call.waitSet {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, call.maxWait)
}

// sameHold reports whether a hold made for call would be the hold made
// for other: what a hold handed on from one call chain to the next must
// not change.
func (call *lockCall) sameHold(other *lockCall) bool {
	return call.ttl == other.ttl && call.payload == other.payload
}
