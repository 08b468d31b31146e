package dlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testenv"
)

// bounded is memory behind a driver that keeps each call's ctx deadline
// and watches nothing else, as go-redis with ContextTimeoutEnabled does:
// a call on a frozen server returns at its deadline, not when its ctx is
// cancelled, with nothing done.
type bounded struct {
	*memory
	acquires    atomic.Int32
	releases    atomic.Int32
	slow        atomic.Int32 // how many of the next attempts run out their deadline
	lostReplies atomic.Int32 // how many of the next releases run out their deadline after releasing
}

var _ driver.DeadlineBound = (*bounded)(nil)

func (b *bounded) BoundsCalls() bool { return true }

// stall waits while the server is frozen, up to ctx's deadline.
func (b *bounded) stall(ctx context.Context) error {
	b.mu.Lock()
	hang := b.hang
	b.mu.Unlock()
	d, ok := ctx.Deadline()
	if hang == nil || !ok {
		return nil
	}
	select {
	case <-hang:
		return nil
	case <-time.After(time.Until(d)):
		return context.DeadlineExceeded
	}
}

func (b *bounded) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	b.acquires.Add(1)
	if b.slow.Add(-1) >= 0 {
		d, ok := ctx.Deadline()
		if !ok {
			return driver.Grant{}, errors.New("an attempt with no deadline")
		}
		time.Sleep(time.Until(d))
		return driver.Grant{}, context.DeadlineExceeded
	}
	if err := b.stall(ctx); err != nil {
		return driver.Grant{}, err
	}
	return b.memory.Acquire(ctx, r)
}

func (b *bounded) Release(ctx context.Context, h driver.Hold) error {
	b.releases.Add(1)
	if err := b.stall(ctx); err != nil {
		return err
	}
	err := b.memory.Release(ctx, h)
	if b.lostReplies.Add(-1) >= 0 {
		d, ok := ctx.Deadline()
		if !ok {
			return errors.New("a release with no deadline")
		}
		time.Sleep(time.Until(d))
		return context.DeadlineExceeded
	}
	return err
}

// cancelBound is bounded whose driver also ends a call when its ctx is
// cancelled (driver.CancelBound), as pgx and go-sql-driver/mysql do.
type cancelBound struct{ *bounded }

var _ driver.CancelBound = cancelBound{}

func (cancelBound) EndsOnCancel() bool { return true }

// With a backend that keeps its calls' ctx, an uncontended Lock and its
// Unlock make their requests on the caller's goroutine: no worker
// starts. A backend that keeps only deadlines does so for a ctx that
// cannot be cancelled; with one that can, and with any other backend,
// the requests run on workers the caller can leave behind.
func TestDeadlineBoundCallsRunInline(t *testing.T) {
	withTimeout := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Minute)
	}
	background := func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }
	for _, tc := range []struct {
		name    string
		backend driver.Backend
		ctx     func() (context.Context, context.CancelFunc)
		inline  bool
	}{
		{"bounded/uncancellable", &bounded{memory: newMemory()}, background, true},
		{"bounded/cancellable", &bounded{memory: newMemory()}, withTimeout, false},
		{"cancel-bound/cancellable", cancelBound{&bounded{memory: newMemory()}}, withTimeout, true},
		{"unbounded", newMemory(), background, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, tc.backend)
			workers := dlock.CountWorkers(c)
			ctx, cancel := tc.ctx()
			defer cancel()
			for range 10 {
				lease, err := c.Lock(ctx, "x")
				if err != nil {
					t.Fatal(err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if n := workers.Load(); (n == 0) != tc.inline {
				t.Fatalf("%d workers started for 10 Lock/Unlock cycles; want none: %v", n, tc.inline)
			}
		})
	}
}

// A backend that keeps only deadlines does not see a cancellation, so a
// Lock whose ctx may be cancelled makes its request on a worker: Lock on
// a frozen server returns within CancelMargin of its ctx's cancellation,
// and the grant the request gets once the server answers is given back.
func TestDeadlineBoundLockHonoursCancel(t *testing.T) {
	b := &bounded{memory: newMemory()}
	c := newClient(t, b)
	b.freeze()
	ctx, cancelled := testenv.CancelSoon()
	_, err := c.Lock(ctx, "x")
	returned := time.Now()
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock on a frozen server, cancelled: %v, want ErrNotAcquired and Canceled", err)
	}
	testenv.CheckWithinMargin(t, "Lock", returned, cancelled)
	b.thaw()
	wait, stop := context.WithTimeout(context.Background(), dlock.DefaultReleaseTimeout)
	defer stop()
	lease, err := newClient(t, b).Lock(wait, "x")
	if err != nil {
		t.Fatalf("another owner after the cancelled Lock: %v", err)
	}
	lease.Unlock(context.Background())
}

// slowGrant is memory whose next attempts answer late: each sleeps for
// its delay, then grants as usual (a slow server, not a lost request).
type slowGrant struct {
	*memory
	delay    time.Duration
	slow     atomic.Int32
	acquires atomic.Int32
}

func (b *slowGrant) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	b.acquires.Add(1)
	if b.slow.Add(-1) >= 0 {
		time.Sleep(b.delay)
	}
	return b.memory.Acquire(ctx, r)
}

// A slow reply is waited for, as long as ctx allows, and never asked for
// again on top of itself: one attempt, one grant, whichever goroutine
// makes the request.
func TestSlowAttemptIsAwaited(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func(*slowGrant) driver.Backend
	}{
		{"inline", func(b *slowGrant) driver.Backend { return cancelBound{&bounded{memory: b.memory}} }},
		{"worker", func(b *slowGrant) driver.Backend { return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &slowGrant{memory: newMemory(), delay: 3 * dlock.CancelMargin}
			b.slow.Store(1)
			be := tc.mk(b)
			if tc.name == "inline" {
				be = slowInline{cancelBound: be.(cancelBound), slow: b}
			}
			c := newClient(t, be)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lease, err := c.TryLock(ctx, "x")
			if err != nil {
				t.Fatalf("TryLock whose reply was late: %v", err)
			}
			defer lease.Unlock(context.Background())
			if n := b.acquires.Load(); n != 1 {
				t.Fatalf("%d attempts, want 1: a late reply is waited for, not asked for again", n)
			}
		})
	}
}

// slowInline is cancelBound whose attempts are slowGrant's.
type slowInline struct {
	cancelBound
	slow *slowGrant
}

func (b slowInline) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return b.slow.Acquire(ctx, r)
}

// A release whose reply is late past its own deadline, ctx still live:
// Unlock asks again through a worker, and "not held" then means the first
// request released the lock. Unlock reports success, and the lock is free.
func TestDeadlineBoundSlowReleaseIsRetried(t *testing.T) {
	b := &bounded{memory: newMemory()}
	c := newClient(t, b)
	ctx := context.Background()
	lease, err := c.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	b.lostReplies.Store(1)
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock whose first reply was lost: %v", err)
	}
	other, err := newClient(t, b).TryLock(ctx, "x")
	if err != nil {
		t.Fatalf("another owner after the Unlock: %v", err)
	}
	other.Unlock(ctx)
}

// A release that runs out its bound and whose retry then finds the hold
// gone after the lease's deadline: the server may have expired it before
// any release came, so Unlock reports the lease as ended, as the Lease
// doc says, not a release it cannot vouch for. (Unlock releases on the
// caller's goroutine only before the watchdog starts, a third into the
// term: a TTL shorter than CancelMargin brings the deadline within the
// first request's bound.)
func TestDeadlineBoundSlowReleaseOfExpiredHold(t *testing.T) {
	b := &bounded{memory: newMemory()}
	c := newClient(t, b, dlock.WithTTL(dlock.CancelMargin*3/4), dlock.WithoutAutoRenew())
	ctx := context.Background()
	lease, err := c.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	// The first release runs out its bound on a frozen server; the server
	// thaws once that bound has passed and the hold has expired there, so
	// the retry finds it gone.
	b.freeze()
	thaw := time.Now().Add(dlock.CancelMargin)
	if expired := b.expiry("x"); expired.After(thaw) {
		thaw = expired
	}
	time.AfterFunc(time.Until(thaw)+100*time.Millisecond, b.thaw)
	err = lease.Unlock(ctx)
	if !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of a hold that expired on the server before its release: %v, want ErrNotHeld", err)
	}
	if n := b.releases.Load(); n != 2 {
		t.Fatalf("%d release requests, want 2 (the one that ran out its bound and its retry)", n)
	}
}

// Unlock on a frozen server, its ctx cancelled: it returns within
// CancelMargin of the cancellation, and the release goes on in the
// background once the server answers.
func TestDeadlineBoundUnlockHonoursCancel(t *testing.T) {
	b := &bounded{memory: newMemory()}
	c := newClient(t, b)
	lease, err := c.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	b.freeze()
	ctx, cancelled := testenv.CancelSoon()
	err = lease.Unlock(ctx)
	returned := time.Now()
	if err == nil {
		t.Fatal("Unlock on a frozen server reported success")
	}
	testenv.CheckWithinMargin(t, "Unlock", returned, cancelled)
	b.thaw()
	wait, stop := context.WithTimeout(context.Background(), 2*dlock.DefaultReleaseTimeout)
	defer stop()
	other, err := newClient(t, b).Lock(wait, "x")
	if err != nil {
		t.Fatalf("another owner after the background release: %v", err)
	}
	other.Unlock(context.Background())
}

// boundedBlocking is bounded whose server queues waiters (driver.Blocker),
// as advisory locks on pgx do: a wait returns as soon as its ctx ends.
type boundedBlocking struct{ *bounded }

func (b boundedBlocking) AcquireWait(ctx context.Context, r driver.Request) (driver.Grant, error) {
	return blocking{b.memory}.AcquireWait(ctx, r)
}

// cancelBoundBlocking is boundedBlocking whose driver also ends a call at
// its ctx's cancellation (driver.CancelBound).
type cancelBoundBlocking struct{ boundedBlocking }

func (cancelBoundBlocking) EndsOnCancel() bool { return true }

// A Lock that waits in the server's queue of a backend that keeps its
// ctx waits on the caller's goroutine, so the grant reaches the caller
// with no goroutine to wake; on any other backend (and with a cancellable
// ctx on one that keeps only deadlines) the wait runs on a worker.
func TestDeadlineBoundWaitRunsInline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func(*memory) driver.Backend
		inline  bool
	}{
		{"cancel-bound", func(m *memory) driver.Backend { return cancelBoundBlocking{boundedBlocking{&bounded{memory: m}}} }, true},
		{"bounded", func(m *memory) driver.Backend { return boundedBlocking{&bounded{memory: m}} }, false},
		{"unbounded", func(m *memory) driver.Backend { return blocking{m} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemory()
			holder, waiter := newClient(t, tc.backend(m)), newClient(t, tc.backend(m))
			workers := dlock.CountWorkers(waiter)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			lease, err := holder.Lock(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				l, err := waiter.Lock(ctx, "x")
				if err == nil {
					err = l.Unlock(ctx)
				}
				got <- err
			}()
			m.waitRefused(t)
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatalf("waiting Lock: %v", err)
			}
			if n := workers.Load(); (n == 0) != tc.inline {
				t.Fatalf("%d workers started for a waiting Lock and its Unlock; want none: %v", n, tc.inline)
			}
		})
	}
}

// A Lock waiting inline in the server's queue returns within
// CancelMargin of its ctx's cancellation, holding nothing: the holder's
// release then lets another owner in at once.
func TestDeadlineBoundWaitHonoursCancel(t *testing.T) {
	m := newMemory()
	b := boundedBlocking{&bounded{memory: m}}
	holder, waiter := newClient(t, b), newClient(t, b)
	lease, err := holder.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancelled := testenv.CancelSoon()
	_, err = waiter.Lock(ctx, "x")
	returned := time.Now()
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting Lock, cancelled: %v, want ErrNotAcquired and Canceled", err)
	}
	testenv.CheckWithinMargin(t, "Lock", returned, cancelled)
	if err := lease.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	other, err := newClient(t, b).TryLock(context.Background(), "x")
	if err != nil {
		t.Fatalf("another owner after the cancelled wait: %v", err)
	}
	other.Unlock(context.Background())
}
