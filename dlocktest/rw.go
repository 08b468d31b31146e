package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

// ReadWriteHarness makes read-write locks for RunReadWrite: each call of
// New is a new owner, returning its read and write Lockers.
type ReadWriteHarness struct {
	New func(t *testing.T) (read, write dlock.Locker)
}

// RunReadWrite is the conformance suite of read-write locks: readers
// share, writers exclude readers and each other, a waiting writer gets
// the lock when the last reader leaves, a writer may downgrade, and under
// contention writers are alone while readers overlap. Each runs on
// separate instances (one per owner) and on one instance shared by every
// goroutine, as a process uses it. Run Run on the write Locker too: it is
// an exclusive lock.
func RunReadWrite(t *testing.T, h ReadWriteHarness) {
	t.Run("ReadersShareWritersExclude", func(t *testing.T) { readersShare(t, h) })
	t.Run("Contention", func(t *testing.T) { rwContention(t, h) })
	t.Run("SharedReadersShare", func(t *testing.T) { sharedReadersShare(t, h) })
	t.Run("SharedContention", func(t *testing.T) { rwContention(t, h.shared(t)) })
}

// shared returns a harness whose New returns one instance every time.
func (h ReadWriteHarness) shared(t *testing.T) ReadWriteHarness {
	read, write := h.New(t)
	return ReadWriteHarness{New: func(*testing.T) (dlock.Locker, dlock.Locker) { return read, write }}
}

// sharedReadersShare: goroutines of one process on one instance read side
// by side, whether the second reader tries or waits, and a writer on the
// same instance waits for both.
func sharedReadersShare(t *testing.T, h ReadWriteHarness) {
	name := Name(t)
	ctx := ctxT(t)
	read, write := h.New(t)
	ra := mustLock(t, ctx, read, name)
	second := make(chan error, 1)
	go func() {
		rb, err := read.TryLock(ctx, name)
		if err != nil {
			second <- fmt.Errorf("a second reader's TryLock on the shared instance: %w", err)
			return
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		rc, err := read.Lock(wctx, name)
		if err != nil {
			_ = rb.Unlock(ctx)
			second <- fmt.Errorf("a third reader's Lock on the shared instance: %w", err)
			return
		}
		if rb.Token() == 0 || rc.Token() == 0 {
			err = fmt.Errorf("readers got tokens %d and %d", rb.Token(), rc.Token())
		}
		second <- errors.Join(err, rb.Unlock(ctx), rc.Unlock(ctx))
	}()
	if err := <-second; err != nil {
		mustUnlock(t, ra)
		t.Fatal(err)
	}
	wantNotAcquired(t, write, name)
	got := make(chan dlock.Lease, 1)
	go func() {
		l, err := write.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case l := <-got:
		unlockAfterFailure(t, l)
		t.Fatal("a writer on the shared instance got the lock beside a reader")
	case <-time.After(100 * time.Millisecond):
	}
	mustUnlock(t, ra)
	wl := <-got
	if wl == nil {
		t.FailNow()
	}
	wantNotAcquired(t, read, name)
	mustUnlock(t, wl)
}

func readersShare(t *testing.T, h ReadWriteHarness) {
	name := Name(t)
	ctx := ctxT(t)
	aRead, _ := h.New(t)
	bRead, bWrite := h.New(t)
	wRead, wWrite := h.New(t)
	ra := mustLock(t, ctx, aRead, name)
	rb, err := bRead.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	wantNotAcquired(t, wWrite, name)
	mustUnlock(t, ra)
	wantNotAcquired(t, wWrite, name)
	got := make(chan dlock.Lease, 1)
	go func() {
		l, err := wWrite.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(50 * time.Millisecond)
	mustUnlock(t, rb)
	wl := <-got
	if wl == nil {
		t.FailNow()
	}
	wantNotAcquired(t, aRead, name)
	// Downgrade: the writer reads too, then stops writing; others may
	// read but not write.
	// The chain holding the write lease (in its ctx) may read; another
	// chain on the same Lockers is another owner.
	if wr, err := wRead.TryLock(ctx, name); err == nil {
		unlockAfterFailure(t, wr)
		t.Fatal("a call chain without the write lease took the read lock beside the writer")
	}
	wr, err := wRead.TryLock(dlock.ContextWithLease(ctx, wl), name)
	if err != nil {
		t.Fatalf("writer taking the read lock: %v", err)
	}
	mustUnlock(t, wl)
	mustUnlock(t, wantAcquired(t, aRead, name))
	wantNotAcquired(t, bWrite, name)
	mustUnlock(t, wr)
	mustUnlock(t, wantAcquired(t, bWrite, name))
}

func rwContention(t *testing.T, h ReadWriteHarness) {
	name := Name(t)
	ctx := ctxT(t)
	var readers, writers, peakReaders atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		read, write := h.New(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				l := read
				if i%4 == 0 {
					l = write
				}
				lease, err := l.Lock(ctx, name)
				if err != nil {
					errs <- err
					return
				}
				if l == write {
					if writers.Add(1) != 1 || readers.Load() != 0 {
						errs <- errors.New("writer not alone")
					}
					time.Sleep(time.Millisecond)
					writers.Add(-1)
				} else {
					n := readers.Add(1)
					if writers.Load() != 0 {
						errs <- errors.New("reader beside a writer")
					}
					for old := peakReaders.Load(); n > old && !peakReaders.CompareAndSwap(old, n); old = peakReaders.Load() {
					}
					time.Sleep(2 * time.Millisecond)
					readers.Add(-1)
				}
				if err := lease.Unlock(context.Background()); err != nil {
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
	if peakReaders.Load() < 2 {
		t.Errorf("readers never overlapped (peak %d)", peakReaders.Load())
	}
}
