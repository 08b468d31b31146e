package dlocktest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

// closer is what every Locker under test has.
type closer interface {
	Close(ctx context.Context) error
}

func closeOf(t *testing.T, l dlock.Locker) closer {
	t.Helper()
	c, ok := l.(closer)
	if !ok {
		t.Fatalf("%T has no Close(ctx) error method", l)
	}
	return c
}

// endedCtx returns a context that has already been cancelled.
func endedCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// sharedLocker is the shape of a Go service: one Locker shared by every
// request goroutine. The goroutines must exclude each other.
func (s suite) sharedLocker(t *testing.T) {
	name := Name(t)
	ctx := ctxT(t)
	l := s.h.New(t)
	var (
		inside, violations atomic.Int32
		counter            int64 // guarded by the lock, and checked by -race
		wg                 sync.WaitGroup
		errs               = make(chan error, s.h.Workers)
	)
	const each = 20
	for w := 0; w < s.h.Workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				lease, err := l.Lock(ctx, name)
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				counter++
				// Another goroutine's TryLock through the same Locker is
				// another call chain: it must not get in.
				if other, err := l.TryLock(ctx, name); err == nil {
					violations.Add(1)
					unlockAfterFailure(t, other)
				} else if !errors.Is(err, dlock.ErrNotAcquired) {
					errs <- err
				}
				inside.Add(-1)
				if err := lease.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if v := violations.Load(); v != 0 {
		t.Errorf("goroutines sharing one Locker were inside at once %d times", v)
	}
	if want := int64(s.h.Workers * each); counter != want {
		t.Errorf("counter = %d, want %d", counter, want)
	}
}

// doPanics checks that Do releases the lock when fn panics and lets the
// panic go on, as net/http's recovery expects.
func (s suite) doPanics(t *testing.T) {
	name := Name(t)
	a, b := s.h.New(t), s.h.New(t)
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Errorf("recovered %v, want the panic of fn", r)
			}
		}()
		_ = dlock.Do(ctxT(t), a, name, func(context.Context, dlock.Lease) error { panic("boom") }) // panics: no error to see
		t.Error("Do returned after fn panicked")
	}()
	mustUnlock(t, wantAcquired(t, b, name))
}

// doArguments checks that Do refuses bad arguments with an error, before
// any I/O, instead of panicking.
func (s suite) doArguments(t *testing.T) {
	l := s.h.New(t)
	fn := func(context.Context, dlock.Lease) error { return nil }
	ctx := ctxT(t)
	if err := dlock.Do(ctx, nil, Name(t), fn); err == nil {
		t.Error("Do with a nil Locker succeeded")
	}
	if err := dlock.Do(ctx, l, Name(t), nil); err == nil {
		t.Error("Do with a nil fn succeeded")
	}
	if err := dlock.Do(ctx, l, "", fn); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("Do with an empty name: %v, want ErrInvalidName", err)
	}
}

// closeWithEndedContext is a shutdown: Close with a context that has
// already ended must still release every held lock at once.
func (s suite) closeWithEndedContext(t *testing.T) {
	name := Name(t)
	ttl := 30 * time.Second
	a, b := s.h.New(t, dlock.WithTTL(ttl)), s.h.New(t)
	lease := mustLock(t, ctxT(t), a, name)
	if err := closeOf(t, a).Close(endedCtx()); err != nil {
		t.Fatalf("Close with an ended context: %v", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatal("Done open after Close")
	}
	if !errors.Is(lease.Err(), dlock.ErrClosed) {
		t.Fatalf("Err() after Close = %v, want ErrClosed", lease.Err())
	}
	// Free now, not after the 30s TTL.
	mustUnlock(t, wantAcquired(t, b, name))
}

// closeStopsWaiters checks that Close ends a Lock that waits (in the
// process or on the server), and that the closed Locker never takes the
// lock afterwards.
func (s suite) closeStopsWaiters(t *testing.T) {
	name := Name(t)
	holder, waiter, third := s.h.New(t), s.h.New(t), s.h.New(t)
	lease := mustLock(t, ctxT(t), holder, name)
	result := make(chan error, 1)
	go func() {
		got, err := waiter.Lock(ctxT(t), name)
		if err == nil {
			unlockAfterFailure(t, got)
		}
		result <- err
	}()
	waitQueued(t, waiter, name)
	if err := closeOf(t, waiter).Close(ctxT(t)); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-result:
		if !errors.Is(err, dlock.ErrClosed) {
			t.Fatalf("waiting Lock after Close: %v, want ErrClosed", err)
		}
	case <-time.After(Timeout):
		t.Fatal("a waiting Lock did not return after Close")
	}
	mustUnlock(t, lease)
	mustUnlock(t, wantAcquired(t, third, name))
}

// waitQueued gives a Lock just started on another goroutine time to reach
// the server's queue or its wait. Nothing observable says when it has, so
// this is the one pause in the suite: a Lock that has not started waiting
// yet makes the test pass for the wrong reason, never fail.
func waitQueued(t *testing.T, _ dlock.Locker, _ string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond)
}

// endedContext checks that a context that has already ended fails every
// acquire before any I/O and takes nothing.
func (s suite) endedContext(t *testing.T) {
	name := Name(t)
	l, other := s.h.New(t), s.h.New(t)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	for what, f := range map[string]func(context.Context, string) (dlock.Lease, error){"Lock": l.Lock, "TryLock": l.TryLock} {
		lease, err := f(ctx, name)
		if err == nil {
			unlockAfterFailure(t, lease)
			t.Fatalf("%s with an expired ctx took the lock", what)
		}
		if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s with an expired ctx: %v, want ErrNotAcquired and DeadlineExceeded", what, err)
		}
	}
	if err := dlock.Do(ctx, l, name, func(context.Context, dlock.Lease) error {
		t.Error("Do with an expired ctx ran fn")
		return nil
	}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do with an expired ctx: %v", err)
	}
	mustUnlock(t, wantAcquired(t, other, name))
}

// closedConnection checks that a Locker on a closed connection or client
// fails at once, not after retrying until its ctx ends.
func (s suite) closedConnection(t *testing.T) {
	l := s.h.Broken(t)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	for what, f := range map[string]func(context.Context, string) (dlock.Lease, error){"Lock": l.Lock, "TryLock": l.TryLock} {
		lease, err := f(ctx, Name(t))
		if err == nil {
			unlockAfterFailure(t, lease)
			t.Fatalf("%s on a closed connection succeeded", what)
		}
		if ctx.Err() != nil {
			t.Fatalf("%s on a closed connection retried until its ctx ended: %v", what, err)
		}
	}
}

// unlockWithEndedContext checks the one behaviour of Unlock when its ctx
// has ended: the lease ends at once, the error wraps ctx.Err() (not
// ErrNotHeld: the lease had not ended before), and the release still
// happens, in the background.
func (s suite) unlockWithEndedContext(t *testing.T) {
	name := Name(t)
	a, b := s.h.New(t, dlock.WithTTL(30*time.Second)), s.h.New(t)
	lease := mustLock(t, ctxT(t), a, name)
	err := lease.Unlock(endedCtx())
	if !errors.Is(err, context.Canceled) || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock with an ended ctx: %v, want context.Canceled and not ErrNotHeld", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatal("Done open after Unlock")
	}
	if !errors.Is(lease.Err(), dlock.ErrUnlocked) {
		t.Fatalf("Err() = %v, want ErrUnlocked", lease.Err())
	}
	// Released in the background well before the 30s TTL.
	ctx, cancel := context.WithTimeout(context.Background(), 2*dlock.DefaultReleaseTimeout)
	defer cancel()
	got, err := b.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock after Unlock with an ended ctx: %v", err)
	}
	mustUnlock(t, got)
}
