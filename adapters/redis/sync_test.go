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

func newSemaphore(t *testing.T, addr, name string, capacity int, lease time.Duration) *redislock.Semaphore {
	t.Helper()
	s, err := redislock.NewSemaphore(client(t, addr), name, capacity, dlock.WithTTL(lease))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Under contention from several clients, no more than the capacity is
// ever out: a counter of holders is checked at every grant.
func TestSemaphoreNeverExceeds(t *testing.T) {
	addr := testenv.RedisAddr(t)
	name := dlocktest.Name(t)
	const capacity, workers, rounds = 3, 8, 15
	var holders, peak atomic.Int32
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	for w := range workers {
		s := newSemaphore(t, addr, name, capacity, 10*time.Second)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				n := 1 + w%2 // some take two permits at once
				p, err := s.Acquire(ctx, n)
				if err != nil {
					t.Error(err)
					return
				}
				now := holders.Add(int32(n))
				if now > capacity {
					t.Errorf("%d permits out of %d", now, capacity)
				}
				for old := peak.Load(); now > old && !peak.CompareAndSwap(old, now); old = peak.Load() {
				}
				time.Sleep(time.Millisecond)
				holders.Add(-int32(n))
				if err := p.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if peak.Load() < 2 {
		t.Errorf("peak of %d holders: the semaphore never let holders share", peak.Load())
	}
}

// A permit whose holder stops renewing comes back after its lease, and
// its release is then refused.
func TestSemaphoreExpiredPermitReturns(t *testing.T) {
	addr := testenv.RedisAddr(t)
	s := newSemaphore(t, addr, dlocktest.Name(t), 1, 300*time.Millisecond)
	ctx := context.Background()
	dead, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("second permit of one: %v, want ErrNotAcquired", err)
	}
	wctx, cancel := context.WithTimeout(ctx, dlocktest.Timeout)
	defer cancel()
	p, err := s.Acquire(wctx, 1) // the dead holder's permit expires
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.Release(ctx); !errors.Is(err, redislock.ErrUnknownPermit) {
		t.Fatalf("release of an expired permit: %v, want ErrUnknownPermit", err)
	}
	if err := p.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Redisson's testReleaseExpired: a permit whose lease ran out, with
// nobody taking it since, cannot be released as if it had held to the end;
// Available counts it free.
func TestSemaphoreReleaseExpired(t *testing.T) {
	addr := testenv.RedisAddr(t)
	lease := 200 * time.Millisecond
	s := newSemaphore(t, addr, dlocktest.Name(t), 2, lease)
	ctx := context.Background()
	p, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if free, used, err := s.Available(ctx); err != nil || free != 1 || used != 1 {
		t.Fatalf("Available with one permit out: %d free, %d used, %v", free, used, err)
	}
	deadline := time.Now().Add(dlocktest.Timeout)
	for { // until the server's clock has passed the lease
		free, _, err := s.Available(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if free == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the permit never expired")
		}
		time.Sleep(lease / 4)
	}
	if err := p.Release(ctx); !errors.Is(err, redislock.ErrUnknownPermit) {
		t.Fatalf("release of an expired permit: %v, want ErrUnknownPermit", err)
	}
	q, err := s.TryAcquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if q.Token() <= p.Token() {
		t.Fatalf("permit tokens %d then %d", p.Token(), q.Token())
	}
	if err := q.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestSemaphoreBadInput(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	for what, f := range map[string]func() error{
		"zero capacity": func() error { _, err := redislock.NewSemaphore(c, "s", 0, dlock.WithTTL(time.Second)); return err },
		"no lease":      func() error { _, err := redislock.NewSemaphore(c, "s", 1, dlock.WithTTL(0)); return err },
		"empty name":    func() error { _, err := redislock.NewSemaphore(c, "", 1, dlock.WithTTL(time.Second)); return err },
		"zero permits": func() error {
			s, _ := redislock.NewSemaphore(c, "s", 2, dlock.WithTTL(time.Second))
			defer s.Close()
			_, err := s.TryAcquire(context.Background(), 0)
			return err
		},
		"more than capacity": func() error {
			s, _ := redislock.NewSemaphore(c, "s", 2, dlock.WithTTL(time.Second))
			defer s.Close()
			_, err := s.Acquire(context.Background(), 3)
			return err
		},
		"negative latch count": func() error {
			l, _ := redislock.NewLatch(c, "l")
			defer l.Close()
			_, err := l.TrySetCount(context.Background(), -1)
			return err
		},
	} {
		if err := f(); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	s, _ := redislock.NewSemaphore(c, dlocktest.Name(t), 1, dlock.WithTTL(time.Second))
	defer s.Close()
	p, _ := s.TryAcquire(context.Background(), 1)
	p.Release(context.Background())
	if err := p.Release(context.Background()); !errors.Is(err, redislock.ErrUnknownPermit) {
		t.Errorf("double release: %v, want ErrUnknownPermit", err)
	}
}

// The latch releases every waiter exactly once, when the count reaches 0.
func TestLatch(t *testing.T) {
	addr := testenv.RedisAddr(t)
	name := dlocktest.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	setter, err := redislock.NewLatch(client(t, addr), name)
	if err != nil {
		t.Fatal(err)
	}
	defer setter.Close()
	if ok, err := setter.TrySetCount(ctx, 3); err != nil || !ok {
		t.Fatalf("TrySetCount: %v %v", ok, err)
	}
	if ok, _ := setter.TrySetCount(ctx, 5); ok {
		t.Fatal("TrySetCount on a set latch succeeded")
	}
	const waiters = 10
	var released atomic.Int32
	var wg sync.WaitGroup
	for range waiters {
		l, _ := redislock.NewLatch(client(t, addr), name)
		defer l.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.Await(ctx); err != nil {
				t.Error(err)
				return
			}
			released.Add(1)
		}()
	}
	for i := 3; i > 0; i-- {
		time.Sleep(50 * time.Millisecond)
		if n := released.Load(); n != 0 {
			t.Fatalf("%d waiters released at count %d", n, i)
		}
		if got, _ := setter.Count(ctx); got != int64(i) {
			t.Fatalf("Count = %d, want %d", got, i)
		}
		if err := setter.CountDown(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if n := released.Load(); n != waiters {
		t.Fatalf("%d of %d waiters released", n, waiters)
	}
}

// The shared contract of dlock.Semaphore, each semaphore on a client of
// its own.
func TestSemaphoreConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	dlocktest.RunSemaphore(t, dlocktest.SemaphoreHarness{
		New: func(t *testing.T, name string, capacity int) dlock.Semaphore {
			return newSemaphore(t, addr, name, capacity, 10*time.Second)
		},
	})
}
