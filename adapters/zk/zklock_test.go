package zklock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

const root = "/dlock-test"

// escapeName is the node name of a test's lock name: only its dots need
// escaping.
var escapeName = strings.NewReplacer(".", "%2E").Replace

func newLocker(t testing.TB, conn *zk.Conn, opts ...dlock.Option) *zklock.Locker {
	t.Helper()
	l, err := zklock.New(conn, root, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}

// noOrphans checks that no lock node is left under root.
func noOrphans(t *testing.T, conn *zk.Conn) {
	t.Helper()
	dirs, _, err := conn.Children(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		nodes, _, err := conn.Children(root + "/" + d)
		if err == nil && len(nodes) > 0 {
			t.Errorf("nodes left under %s/%s: %v", root, d, nodes)
		}
	}
}

func TestConformance(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	const session = 4 * time.Second
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			// Each Locker has its own session, as separate processes would.
			conn := testenv.ZK(t, addrs, session)
			return newLocker(t, conn, append([]dlock.Option{dlock.WithTTL(session)}, opts...)...)
		},
		Broken: func(t *testing.T) dlock.Locker {
			conn := testenv.ZK(t, addrs, session)
			l := newLocker(t, conn)
			conn.Close()
			return l
		},
		// The slow link's session is long enough for its heartbeats to
		// be answered at the slowest latency (and the Locker's TTL, set
		// by the subtests, no longer).
		Dial: func(t *testing.T, via string, opts ...dlock.Option) dlock.Locker {
			const slowSession = 12 * time.Second
			conn := testenv.ZK(t, []string{via}, slowSession)
			return newLocker(t, conn, append([]dlock.Option{dlock.WithTTL(slowSession)}, opts...)...)
		},
		Addr: addrs[0],
	})
	noOrphans(t, testenv.ZK(t, addrs, session))
}

// Curator's testNoOrphanedNodes/testKilledSession: a waiter's queue node
// deleted from outside. The waiter queues again, instead of failing, and
// gets the lock when the holder lets go.
func TestWaiterRequeuesWhenItsNodeGoes(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	holder := newLocker(t, testenv.ZK(t, addrs, 4*time.Second), dlock.WithTTL(4*time.Second))
	waiter := newLocker(t, testenv.ZK(t, addrs, 4*time.Second), dlock.WithTTL(4*time.Second))
	name := dlocktest.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	held, err := holder.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, name)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	waitForNodes(t, escapeName(name), 2)
	admin := testenv.ZK(t, addrs, 4*time.Second)
	dir := root + "/" + escapeName(name)
	nodes, _, err := admin.Children(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(nodes, func(x, y string) int { return strings.Compare(x[len(x)-10:], y[len(y)-10:]) })
	if err := admin.Delete(dir+"/"+nodes[1], -1); err != nil { // the waiter's
		t.Fatal(err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter whose node was deleted: %v", err)
	}
}

// ZooKeeper's own tree is never written: roots inside /zookeeper are
// refused by New, and under root "/" the name that maps onto /zookeeper
// by every call, before any I/O (the closed connection would fail any).
func TestSystemTreeRefused(t *testing.T) {
	conn := testenv.ZK(t, testenv.ZKAddrs(t), 4*time.Second)
	for _, root := range []string{"/zookeeper", "/zookeeper/quota", "/zookeeper/x/y"} {
		if _, err := zklock.New(conn, root); err == nil || !strings.Contains(err.Error(), "ZooKeeper's own tree") {
			t.Errorf("New with root %s: %v", root, err)
		}
	}
	top, err := zklock.New(conn, "/")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Closing(t, top)
	conn.Close()
	ctx := context.Background()
	if _, err := top.TryLock(ctx, "zookeeper"); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("TryLock(zookeeper) under /: %v, want ErrInvalidName", err)
	}
	if _, err := top.Lock(ctx, "zookeeper"); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("Lock(zookeeper) under /: %v, want ErrInvalidName", err)
	}
	if _, _, err := top.Inspect(ctx, "zookeeper"); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("Inspect(zookeeper) under /: %v, want ErrInvalidName", err)
	}
}

// A held node deleted from outside ends the lease at once (the watch on
// the node), not at the next renewal a TTL/3 later.
func TestHeldNodeDeletedEndsLease(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	l := newLocker(t, testenv.ZK(t, addrs, 4*time.Second), dlock.WithTTL(time.Hour)) // renewal far off
	name := dlocktest.Name(t)
	ctx := context.Background()
	lease, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	admin := testenv.ZK(t, addrs, 4*time.Second)
	dir := root + "/" + escapeName(name)
	nodes, _, err := admin.Children(dir)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("nodes %v, %v", nodes, err)
	}
	if err := admin.Delete(dir+"/"+nodes[0], -1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	case <-time.After(dlocktest.Timeout):
		t.Fatal("Done stayed open after the held node was deleted")
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Fatalf("Err() = %v, want ErrLost", lease.Err())
	}
}
