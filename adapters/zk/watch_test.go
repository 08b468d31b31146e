package zklock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// dropEvents is a proxy to ZooKeeper that drops every watch event the
// server sends (xid -1): a watch lost as go-zookeeper can lose one when it
// reconnects. Everything else passes.
func dropEvents(t *testing.T, target string) *zkProxy {
	return newZKProxy(t, target, 0, nil, func(reply []byte) ([]byte, bool) {
		if xidOf(reply) == -1 {
			return nil, false
		}
		return reply, false
	})
}

// A waiter whose watch never fires still gets the lock once it is free:
// it looks at its predecessor again after PushFallback.
func TestLostWatch(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	holder := newLocker(t, testenv.ZK(t, addrs[:1], 10*time.Second))
	first, err := holder.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	admin := testenv.ZK(t, addrs[:1], 10*time.Second)
	deaf := testenv.ZK(t, []string{dropEvents(t, addrs[0]).addr()}, 10*time.Second)
	waiter := newLocker(t, deaf, func(c *dlock.Config) { c.PushFallback = 200 * time.Millisecond })
	got := make(chan error, 1)
	go func() {
		lease, err := waiter.Lock(ctx, name)
		if err == nil {
			err = lease.Unlock(ctx)
		}
		got <- err
	}()
	for { // until the waiter's node is queued behind the holder's
		nodes, _, err := admin.Children(root + "/" + escapeName(name))
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("a waiter whose watch was lost: %v", err)
	}
}
