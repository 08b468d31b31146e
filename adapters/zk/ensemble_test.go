package zklock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// ensembleSession outlasts a leader election (~0.3s here) several times.
const ensembleSession = 6 * time.Second

func TestEnsembleConformance(t *testing.T) {
	e := testenv.StartZKEnsemble(t)
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			conn := testenv.ZK(t, e.Addrs, ensembleSession)
			return newLocker(t, conn, append([]dlock.Option{dlock.WithTTL(ensembleSession)}, opts...)...)
		},
		Workers: 5, Increments: 40,
	})
	noOrphans(t, testenv.ZK(t, e.Addrs, ensembleSession))
}

// Killing the leader while a lock is held: the holder keeps its lease
// (its session survives the election), nobody else gets the lock, and a
// waiter gets it after the holder releases, once a new leader serves.
func TestLeaderKilled(t *testing.T) {
	e := testenv.StartZKEnsemble(t)
	defer e.Restart(t)
	ctx := context.Background()
	name := dlocktest.Name(t)
	holder := newLocker(t, testenv.ZK(t, e.Addrs, ensembleSession), dlock.WithTTL(ensembleSession))
	waiter := newLocker(t, testenv.ZK(t, e.Addrs, ensembleSession), dlock.WithTTL(ensembleSession))
	lease, err := holder.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	var got atomic.Pointer[dlock.Lease]
	waited := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, dlocktest.Timeout)
		defer cancel()
		l, err := waiter.Lock(wctx, name)
		if err == nil {
			got.Store(&l)
		}
		waited <- err
	}()

	leader := e.Leader()
	if leader < 0 {
		t.Fatal("no leader")
	}
	e.Kill(t, leader)
	t.Logf("killed leader %d", leader)
	// Across the election and a few renewals the holder keeps its lease
	// and the waiter keeps waiting.
	deadline := time.Now().Add(2 * ensembleSession / 3)
	for time.Now().Before(deadline) {
		select {
		case <-lease.Done():
			t.Fatalf("holder lost its lease across the election: %v", lease.Err())
		default:
		}
		if got.Load() != nil {
			t.Fatal("a second owner got the lock while the holder held it")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := lease.Refresh(ctx); err != nil {
		t.Fatalf("holder's refresh after the election: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the election: %v", err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("waiter after the election: %v", err)
	}
	next := *got.Load()
	if next.Token() <= lease.Token() {
		t.Fatalf("token %d after %d", next.Token(), lease.Token())
	}
	if err := next.Unlock(ctx); err != nil && !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatal(err)
	}
}
