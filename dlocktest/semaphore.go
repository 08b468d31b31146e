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

// SemaphoreHarness tells RunSemaphore how to make semaphores of the
// backend under test.
type SemaphoreHarness struct {
	// New returns the semaphore name with capacity permits, as a new
	// client would (processes share a semaphore by its name); it
	// registers the semaphore's clean-up with t.
	New func(t *testing.T, name string, capacity int) dlock.Semaphore
}

// RunSemaphore runs the conformance suite of dlock.Semaphore against h,
// one subtest per property.
func RunSemaphore(t *testing.T, h SemaphoreHarness) {
	t.Run("NeverOverCapacity", h.neverOverCapacity)
	t.Run("TryAcquireWhenFull", h.tryAcquireWhenFull)
	t.Run("BadInput", h.badInput)
	t.Run("AcquireEndsWithCtx", h.acquireEndsWithCtx)
	t.Run("WaiterWakes", h.waiterWakes)
	t.Run("ReleaseAndRefresh", h.releaseAndRefresh)
	t.Run("TokensIncrease", h.tokensIncrease)
}

func mustAcquire(t *testing.T, s dlock.Semaphore, n int) dlock.Permit {
	t.Helper()
	p, err := s.TryAcquire(ctxT(t), n)
	if err != nil {
		t.Fatalf("TryAcquire(%d): %v", n, err)
	}
	return p
}

func mustRelease(t *testing.T, p dlock.Permit) {
	t.Helper()
	if err := p.Release(ctxT(t)); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// Workers on clients of their own take 1 or 2 permits at a time: the
// permits out never exceed the capacity, and every worker gets through.
func (h SemaphoreHarness) neverOverCapacity(t *testing.T) {
	const capacity, workers, rounds = 3, 6, 10
	name := Name(t)
	var inUse, most atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		s := h.New(t, name, capacity)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				n := 1 + (w+r)%2
				p, err := s.Acquire(ctxT(t), n)
				if err != nil {
					errs <- err
					return
				}
				now := inUse.Add(int64(n))
				for {
					m := most.Load()
					if now <= m || most.CompareAndSwap(m, now) {
						break
					}
				}
				time.Sleep(time.Millisecond) // the work the permits guard
				inUse.Add(-int64(n))
				if err := p.Release(ctxT(t)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := most.Load(); m > capacity {
		t.Fatalf("%d permits out at once of a capacity of %d", m, capacity)
	}
}

func (h SemaphoreHarness) tryAcquireWhenFull(t *testing.T) {
	name := Name(t)
	a, b := h.New(t, name, 2), h.New(t, name, 2)
	p := mustAcquire(t, a, 2)
	if q, err := b.TryAcquire(ctxT(t), 1); !errors.Is(err, dlock.ErrNotAcquired) {
		if err == nil {
			mustRelease(t, q)
		}
		t.Fatalf("TryAcquire on a full semaphore: %v, want ErrNotAcquired", err)
	}
	mustRelease(t, p)
	mustRelease(t, mustAcquire(t, b, 2))
}

// n outside 1…capacity is refused before any I/O, not as ErrNotAcquired.
func (h SemaphoreHarness) badInput(t *testing.T) {
	s := h.New(t, Name(t), 2)
	for _, n := range []int{0, -1, 3} {
		if p, err := s.TryAcquire(ctxT(t), n); err == nil || errors.Is(err, dlock.ErrNotAcquired) {
			if err == nil {
				mustRelease(t, p)
			}
			t.Errorf("TryAcquire(%d) of a capacity of 2: %v, want a bad-input error", n, err)
		}
		if p, err := s.Acquire(ctxT(t), n); err == nil || errors.Is(err, dlock.ErrNotAcquired) {
			if err == nil {
				mustRelease(t, p)
			}
			t.Errorf("Acquire(%d) of a capacity of 2: %v, want a bad-input error", n, err)
		}
	}
}

// A wait that ctx ends fails with ErrNotAcquired and ctx's error, and
// leaves nothing taken: once the holder releases, the whole capacity is
// free.
func (h SemaphoreHarness) acquireEndsWithCtx(t *testing.T) {
	name := Name(t)
	holder, waiter := h.New(t, name, 1), h.New(t, name, 1)
	p := mustAcquire(t, holder, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if q, err := waiter.Acquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		if err == nil {
			mustRelease(t, q)
		}
		t.Fatalf("Acquire past its ctx: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
	}
	mustRelease(t, p)
	mustRelease(t, mustAcquire(t, waiter, 1))
}

// A waiter gets the permits when they are released, without polling for
// long.
func (h SemaphoreHarness) waiterWakes(t *testing.T) {
	name := Name(t)
	holder, waiter := h.New(t, name, 1), h.New(t, name, 1)
	p := mustAcquire(t, holder, 1)
	got := make(chan error, 1)
	go func() {
		q, err := waiter.Acquire(ctxT(t), 1)
		if err == nil {
			err = q.Release(ctxT(t))
		}
		got <- err
	}()
	mustRelease(t, p)
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(Timeout):
		t.Fatal("the waiter did not get the released permit")
	}
}

// Refresh confirms a held permit; after Release, Release and Refresh say
// ErrUnknownPermit.
func (h SemaphoreHarness) releaseAndRefresh(t *testing.T) {
	s := h.New(t, Name(t), 1)
	p := mustAcquire(t, s, 1)
	if p.N() != 1 || p.ID() == "" {
		t.Fatalf("permit N %d, ID %q", p.N(), p.ID())
	}
	if err := p.Refresh(ctxT(t)); err != nil {
		t.Fatalf("Refresh of a held permit: %v", err)
	}
	mustRelease(t, p)
	if err := p.Release(ctxT(t)); !errors.Is(err, dlock.ErrUnknownPermit) {
		t.Errorf("second Release: %v, want ErrUnknownPermit", err)
	}
	if err := p.Refresh(ctxT(t)); !errors.Is(err, dlock.ErrUnknownPermit) {
		t.Errorf("Refresh after Release: %v, want ErrUnknownPermit", err)
	}
}

func (h SemaphoreHarness) tokensIncrease(t *testing.T) {
	name := Name(t)
	a, b := h.New(t, name, 2), h.New(t, name, 2)
	var last uint64
	for i := range 4 {
		s := a
		if i%2 == 1 {
			s = b
		}
		p := mustAcquire(t, s, 1)
		if p.Token() <= last {
			t.Fatalf("permit token %d after %d", p.Token(), last)
		}
		last = p.Token()
		mustRelease(t, p)
	}
}
