package zklock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func newRW(t *testing.T, opts ...dlock.Option) *zklock.ReadWrite {
	t.Helper()
	conn := testenv.ZK(t, testenv.ZKAddrs(t), 4*time.Second)
	rw, err := zklock.NewReadWrite(conn, root, append([]dlock.Option{dlock.WithTTL(4 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Closing(t, rw.Read)
	testenv.Closing(t, rw.Write)
	return rw
}

func TestRWWriteConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { return newRW(t, opts...).Write },
		Broken: func(t *testing.T) dlock.Locker {
			conn := testenv.ZK(t, testenv.ZKAddrs(t), 4*time.Second)
			rw, err := zklock.NewReadWrite(conn, root)
			if err != nil {
				t.Fatal(err)
			}
			conn.Close()
			testenv.Closing(t, rw.Read)
			return testenv.Closing(t, rw.Write)
		},
	})
}

func TestRWConformance(t *testing.T) {
	dlocktest.RunReadWrite(t, dlocktest.ReadWriteHarness{
		New: func(t *testing.T) (dlock.Locker, dlock.Locker) {
			rw := newRW(t)
			return rw.Read, rw.Write
		},
	})
}

// Curator's testContendingDowngrading: A holds the write lock, B's writer
// queues behind it, and A's chain takes the read lock. A must get it at
// once (it would otherwise wait for B, which waits for A).
func TestDowngradeWithAWriterQueued(t *testing.T) {
	a, b := newRW(t), newRW(t)
	name := dlocktest.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	wl, err := a.Write.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan dlock.Lease, 1)
	go func() {
		l, err := b.Write.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		queued <- l
	}()
	waitForNodes(t, escapeName(name)+".rw", 2)
	rl, err := a.Read.TryLock(dlock.ContextWithLease(ctx, wl), name)
	if err != nil {
		t.Fatalf("downgrade with another owner's writer queued: %v", err)
	}
	if err := wl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-queued:
		t.Fatal("B's writer got in while A still reads")
	default:
	}
	if err := rl.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if l := <-queued; l != nil {
		l.Unlock(ctx)
	}
}

// waitForNodes waits until the lock directory dir (an escaped name and
// its suffix) holds n nodes: the observable sign that a waiter has queued.
func waitForNodes(t *testing.T, dir string, n int) {
	t.Helper()
	conn := testenv.ZK(t, testenv.ZKAddrs(t), 4*time.Second)
	deadline := time.Now().Add(dlocktest.Timeout)
	for {
		nodes, _, err := conn.Children(root + "/" + dir)
		if err == nil && len(nodes) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d nodes under %s, want %d (err %v)", len(nodes), dir, n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
