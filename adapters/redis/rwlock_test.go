package redislock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func newRW(t testing.TB, addr string, opts ...dlock.Option) *redislock.ReadWrite {
	t.Helper()
	rw, err := redislock.NewReadWrite(client(t, addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rw.Read.Close(context.Background())
		rw.Write.Close(context.Background())
	})
	return rw
}

// The write side is an exclusive lock and passes the whole suite.
func TestRWWriteConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			return newRW(t, addr, opts...).Write
		},
		SharedOwners: true,
	})
}

func TestRWReadersShareWritersExclude(t *testing.T) {
	addr := testenv.RedisAddr(t)
	name := dlocktest.Name(t)
	ctx := context.Background()
	a, b, w := newRW(t, addr), newRW(t, addr), newRW(t, addr)
	ra, err := a.Read.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Read.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	if _, err := w.Write.TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("writer while readers hold: %v, want ErrNotAcquired", err)
	}
	ra.Unlock(ctx)
	if _, err := w.Write.TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("writer while one reader holds: %v, want ErrNotAcquired", err)
	}
	// A waiting writer gets the lock when the last reader leaves.
	got := make(chan dlock.Lease, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, dlocktest.Timeout)
		defer cancel()
		l, err := w.Write.Lock(wctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(50 * time.Millisecond)
	rb.Unlock(ctx)
	wl := <-got
	if wl == nil {
		t.FailNow()
	}
	if _, err := a.Read.TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("reader while a writer holds: %v, want ErrNotAcquired", err)
	}
	// Downgrade: the writer reads too, then stops writing; others may read
	// but not write.
	wr, err := w.Read.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("writer taking the read lock: %v", err)
	}
	if err := wl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := a.Read.TryLock(ctx, name); err != nil {
		t.Fatalf("reader after the downgrade: %v", err)
	} else {
		l.Unlock(ctx)
	}
	if _, err := b.Write.TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("writer while the downgraded reader holds: %v", err)
	}
	wr.Unlock(ctx)
}

// Under contention writers are alone and readers overlap.
func TestRWContention(t *testing.T) {
	addr := testenv.RedisAddr(t)
	name := dlocktest.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	var readers, writers, peakReaders atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		rw := newRW(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if i%4 == 0 {
					l, err := rw.Write.Lock(ctx, name)
					if err != nil {
						t.Error(err)
						return
					}
					if writers.Add(1) != 1 || readers.Load() != 0 {
						t.Error("writer not alone")
					}
					time.Sleep(time.Millisecond)
					writers.Add(-1)
					l.Unlock(ctx)
					continue
				}
				l, err := rw.Read.Lock(ctx, name)
				if err != nil {
					t.Error(err)
					return
				}
				n := readers.Add(1)
				if writers.Load() != 0 {
					t.Error("reader beside a writer")
				}
				for old := peakReaders.Load(); n > old && !peakReaders.CompareAndSwap(old, n); old = peakReaders.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				readers.Add(-1)
				l.Unlock(ctx)
			}
		}()
	}
	wg.Wait()
	if peakReaders.Load() < 2 {
		t.Errorf("readers never overlapped (peak %d)", peakReaders.Load())
	}
}
