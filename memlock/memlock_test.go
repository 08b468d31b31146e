package memlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/election/electiontest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/memlock"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newLocker(t *testing.T, s *memlock.Server, opts ...dlock.Option) *memlock.Locker {
	t.Helper()
	l, err := memlock.NewLocker(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}

func TestConformance(t *testing.T) {
	s := memlock.NewServer()
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { return newLocker(t, s, opts...) },
		Broken: func(t *testing.T) dlock.Locker {
			down := memlock.NewServer()
			l := newLocker(t, down)
			down.Down(errors.New("memlock: the server is gone"))
			return l
		},
	})
}

func TestElection(t *testing.T) {
	s := memlock.NewServer()
	electiontest.Run(t, electiontest.Harness{
		New:        func(t *testing.T, opts ...dlock.Option) dlock.Locker { return newLocker(t, s, opts...) },
		OwnServers: true,
	})
}

func TestSchedlock(t *testing.T) {
	s := memlock.NewServer()
	schedlocktest.Run(t, schedlocktest.Harness{
		New:        func(t *testing.T, opts ...dlock.Option) dlock.Locker { return newLocker(t, s, opts...) },
		OwnServers: true,
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// Expire ends the hold at once: the holder's Done closes before anyone
// else is granted the name, and then the name is free.
func TestExpire(t *testing.T) {
	s := memlock.NewServer()
	ctx := ctxT(t)
	a, b := newLocker(t, s), newLocker(t, s)
	lease, err := a.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Expire("x") {
		t.Fatal("Expire of a held name reported it free")
	}
	next, err := b.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Unlock(ctx)
	select {
	case <-lease.Done():
	default:
		t.Fatal("another Locker got the name while the expired lease's Done was open")
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) || next.Token() <= lease.Token() {
		t.Fatalf("expired lease Err %v, tokens %d then %d", lease.Err(), lease.Token(), next.Token())
	}
	if s.Expire("free") {
		t.Error("Expire of a free name reported it held")
	}
}

// FailRenewals: renewals that keep failing past the TTL lose the lease;
// one that fails once does not.
func TestFailRenewals(t *testing.T) {
	s := memlock.NewServer()
	ctx := ctxT(t)
	l := newLocker(t, s, dlock.WithTTL(300*time.Millisecond))
	lease, err := l.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	s.FailRenewals("x", 1, nil)
	time.Sleep(600 * time.Millisecond) // past a TTL: the next renewals succeed
	if err := lease.Err(); err != nil {
		t.Fatalf("one failed renewal lost the lease: %v", err)
	}
	boom := errors.New("network partition")
	s.FailRenewals("x", 1000, boom)
	select {
	case <-lease.Done():
	case <-ctx.Done():
		t.Fatal("renewals failing past the TTL did not end the lease")
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) || !errors.Is(lease.Err(), boom) {
		t.Fatalf("Err = %v, want ErrLost with the renewal's error", lease.Err())
	}
	s.FailRenewals("x", 0, nil)
}

// Block holds Lock until Unblock, or until its ctx ends.
func TestBlock(t *testing.T) {
	s := memlock.NewServer()
	ctx := ctxT(t)
	l := newLocker(t, s)
	s.Block("x")
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(short, "x"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock of a blocked name = %v, want ErrNotAcquired when ctx ends", err)
	}
	got := make(chan error, 1)
	go func() {
		lease, err := l.Lock(ctx, "x")
		if err == nil {
			err = lease.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("Lock of a blocked name returned %v before Unblock", err)
	default:
	}
	s.Unblock("x")
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// Down fails every request until the Server is back.
func TestDown(t *testing.T) {
	s := memlock.NewServer()
	ctx := ctxT(t)
	l := newLocker(t, s)
	gone := errors.New("connection refused")
	s.Down(gone)
	if _, err := l.Lock(ctx, "x"); !errors.Is(err, gone) {
		t.Fatalf("Lock with the server down = %v, want its error", err)
	}
	s.Down(nil)
	lease, err := l.TryLock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestNewLockerRefusesAZeroServer(t *testing.T) {
	if _, err := memlock.NewLocker(&memlock.Server{}); err == nil {
		t.Fatal("NewLocker on a zero Server succeeded")
	}
	if _, err := memlock.NewLocker(nil); err == nil {
		t.Fatal("NewLocker on a nil Server succeeded")
	}
}
