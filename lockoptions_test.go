package dlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
)

// A hold handed on in the process (driver.Transferer) is made with the
// settings of the chain it goes to: its LockTTL and payload, not those
// of the hold that ended; when the first in line leaves while the hold
// is being handed to it, the next, who asks for other settings, gets
// them all the same.
func TestHandOffTakesTheWaitersSettings(t *testing.T) {
	ctx := context.Background()
	m := newHanding()
	c := newClient(t, m)
	name := dlocktest.Name(t)
	first, err := c.LockWith(ctx, name, dlock.WithPayload("first"))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		lease dlock.Lease
		err   error
	}
	lockWith := func(ctx context.Context, opts ...dlock.LockOption) chan got {
		ch := make(chan got, 1)
		go func() {
			l, err := c.LockWith(ctx, name, opts...)
			ch <- got{l, err}
		}()
		return ch
	}
	leaving, leave := context.WithCancel(ctx)
	gone := lockWith(leaving, dlock.WithPayload("leaves"))
	dlocktest.Eventually(t, func() bool { return dlock.LocalWaiting(c, name) == 1 }, "first waiter queued")
	second := lockWith(ctx, dlock.WithPayload("second"), dlock.LockTTL(time.Hour))
	dlocktest.Eventually(t, func() bool { return dlock.LocalWaiting(c, name) == 2 }, "second waiter queued")
	// The first in line leaves while the hold is being handed to it.
	m.mu.Lock()
	m.entered, m.gate = make(chan struct{}, 1), make(chan struct{})
	gate := m.gate
	m.mu.Unlock()
	unlocked := make(chan error, 1)
	go func() { unlocked <- first.Unlock(ctx) }()
	<-m.entered
	leave()
	if g := <-gone; !errors.Is(g.err, dlock.ErrNotAcquired) {
		t.Fatalf("the waiter that left: %v", g.err)
	}
	m.mu.Lock()
	m.entered, m.gate = nil, nil
	m.mu.Unlock()
	close(gate)
	if err := <-unlocked; err != nil {
		t.Fatal(err)
	}
	g := <-second
	if g.err != nil {
		t.Fatal(g.err)
	}
	defer g.lease.Unlock(ctx)
	h, held, err := c.Inspect(ctx, name)
	if err != nil || !held || h.Payload != "second" || h.Owner != g.lease.Owner() {
		t.Fatalf("Inspect: %+v held=%v err=%v, want the second chain's hold with its payload", h, held, err)
	}
	if left := time.Until(g.lease.Deadline()); left < time.Hour-time.Minute {
		t.Fatalf("LockTTL(1h) of a hold handed on: deadline in %v", left)
	}
	if h.TTL < time.Hour-time.Minute {
		t.Fatalf("LockTTL(1h) of a hold handed on: the server keeps it for %v", h.TTL)
	}
}

// Per-call options fail before any I/O when bad, and a Locker that takes
// none refuses them.
func TestLockOptionsRefused(t *testing.T) {
	ctx := context.Background()
	m := newMemory()
	c := newClient(t, m, dlock.WithTTL(time.Second))
	name := dlocktest.Name(t)
	m.freeze() // a call that reached the backend would hang
	cases := map[string][]dlock.LockOption{
		"LockTTL":    {dlock.LockTTL(dlock.MinTTL - 1)},
		"WaitAtMost": {dlock.WaitAtMost(-time.Second)},
		"bytes":      {dlock.WithPayload(strings.Repeat("é", dlock.MaxPayloadLen/2+1))},
		"UTF-8":      {dlock.WithPayload("\xff")},
		"character":  {dlock.WithPayload("a\x00b")},
		"nil":        {nil},
	}
	for what, opts := range cases {
		if l, err := c.LockWith(ctx, name, opts...); err == nil || !strings.Contains(err.Error(), what) || strings.Contains(err.Error(), "\n") {
			if l != nil {
				l.Unlock(ctx)
			}
			t.Errorf("LockWith: %v, want one line naming %q", err, what)
		}
	}
	if _, err := c.TryLockWith(ctx, name, dlock.WaitAtMost(time.Second)); err == nil {
		t.Error("TryLockWith(WaitAtMost): no error")
	}
	m.thaw()
	if _, err := dlock.LockWith(ctx, plainLocker{c}, name, dlock.WaitAtMost(time.Second)); err == nil {
		t.Fatal("LockWith options on a Locker that takes none: no error")
	}
	l, err := dlock.LockWith(ctx, plainLocker{c}, name)
	if err != nil {
		t.Fatalf("LockWith no options on a plain Locker: %v", err)
	}
	l.Unlock(ctx)
}

// plainLocker hides every method but the Locker interface's.
type plainLocker struct{ l dlock.Locker }

func (p plainLocker) Lock(ctx context.Context, name string) (dlock.Lease, error) {
	return p.l.Lock(ctx, name)
}

func (p plainLocker) TryLock(ctx context.Context, name string) (dlock.Lease, error) {
	return p.l.TryLock(ctx, name)
}
