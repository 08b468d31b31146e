package zklock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// opPing is the opcode of go-zookeeper's keep-alive, which no lock sends.
const opPing = 11

// requests counts every request sent but the pings.
func (c *opCounter) requests() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for op, k := range c.ops {
		if op != opPing && op != opHandOff {
			n += k
		}
	}
	return n
}

// czxid is the Czxid of the one node in dir, read through conn.
func czxid(t *testing.T, conn *zk.Conn, dir string) uint64 {
	t.Helper()
	nodes, _, err := conn.Children(dir)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("the held node of %s: %v, %v", dir, nodes, err)
	}
	_, st, err := conn.Get(dir + "/" + nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	return uint64(st.Czxid)
}

// A lock taken at once costs three requests, as the recipe's create, read
// of the queue and delete do: the node's create, a multi request whose
// reply tells that the node is first in its queue and its Czxid, the
// token (see makeNode); the read that watches the node for the lease (see
// lostWhenGone), which Lock does not wait for; and the delete at Unlock.
func TestUncontendedCycleRequests(t *testing.T) {
	ops := &opCounter{}
	l := newLocker(t, ops.conn(t), dlock.WithHandOffs(0))
	admin := testenv.ZK(t, testenv.ZKAddrs(t), 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	dir := root + "/" + escapeName(name)
	cycle := func() {
		lease, err := l.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if c := czxid(t, admin, dir); lease.Token() != c {
			t.Errorf("token %d, the node's Czxid %d", lease.Token(), c)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // also makes the lock's directory
	const cycles = 20
	before := ops.requests()
	for range cycles {
		cycle()
	}
	time.Sleep(100 * time.Millisecond) // a late request would be counted
	if got := ops.requests() - before; got != 3*cycles {
		t.Errorf("%d requests in %d Lock/Unlock cycles, want 3 each", got, cycles)
	}
}

// Where a lock's directory lets a client create and delete nodes but not
// write the directory itself, nodes are made by plain creates and each
// token read after its create: locks, tokens and hand-offs between call
// chains work as anywhere else.
func TestDirectoryWithoutWritePermission(t *testing.T) {
	const aclRoot = "/dlock-nowrite-test"
	addrs := testenv.ZKAddrs(t)
	ops := &opCounter{}
	l, err := zklock.New(ops.conn(t), aclRoot)
	if err != nil {
		t.Fatal(err)
	}
	l = testenv.Closing(t, l)
	admin := testenv.ZK(t, addrs, 10*time.Second)
	name := dlocktest.Name(t)
	dir := aclRoot + "/" + escapeName(name)
	if _, err := admin.Create(aclRoot, nil, zk.FlagPersistent, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatal(err)
	}
	if _, err := admin.Create(dir, nil, zk.FlagPersistent, zk.WorldACL(zk.PermRead|zk.PermCreate|zk.PermDelete)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(dir, -1) })

	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	var last uint64
	for range 3 {
		lease, err := l.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if c := czxid(t, admin, dir); lease.Token() != c || lease.Token() <= last {
			t.Errorf("token %d: the node's Czxid is %d, the last token %d", lease.Token(), c, last)
		}
		last = lease.Token()
		later := testenv.LockLater(t, ctx, l, name) // queues in the process: a hand-off
		time.Sleep(50 * time.Millisecond)
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		next := <-later
		if next == nil {
			t.FailNow()
		}
		if c := czxid(t, admin, dir); next.Token() != c || next.Token() <= last {
			t.Errorf("token %d after a hand-off: the node's Czxid is %d, the last token %d", next.Token(), c, last)
		}
		last = next.Token()
		if err := next.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ops.count(opCreate) == 0 {
		t.Error("no plain create: the directory's refused write was not the case made")
	}
	if nodes, _, err := admin.Children(dir); err != nil || len(nodes) != 0 {
		t.Errorf("nodes left: %v, %v", nodes, err)
	}
}

// Lock returns a lock taken at once as soon as its node's create has
// answered: the read that watches the node goes on behind it. Its reply is
// held back here until Lock has returned, which a Lock that waited for it
// never would.
func TestLockTakenAtOnceWaitsForTheCreateAlone(t *testing.T) {
	var (
		mu    sync.Mutex
		reads = map[int32]bool{} // xids of getData requests
	)
	held := make(chan struct{})
	p := newZKProxy(t, testenv.ZKAddrs(t)[0], 0, func(f []byte) ([]byte, bool) {
		if opcodeOf(f) == opGetData {
			mu.Lock()
			reads[xidOf(f)] = true
			mu.Unlock()
		}
		return f, false
	}, func(f []byte) ([]byte, bool) {
		mu.Lock()
		isRead := reads[xidOf(f)]
		mu.Unlock()
		if isRead {
			<-held // every later reply waits behind it too
		}
		return f, false
	})
	l := newLocker(t, testenv.ZK(t, []string{p.addr()}, 10*time.Second))
	admin := testenv.ZK(t, testenv.ZKAddrs(t), 10*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	var release sync.Once
	defer release.Do(func() { close(held) })
	lease, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock with its node's read held back: %v", err)
	}
	for sent := 0; sent != 1; { // before Lock returned, or since
		if ctx.Err() != nil {
			t.Fatalf("%d reads of the node sent, want the one that watches it", sent)
		}
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		sent = len(reads)
		mu.Unlock()
	}
	release.Do(func() { close(held) })
	if c := czxid(t, admin, root+"/"+escapeName(name)); lease.Token() != c {
		t.Errorf("token %d, the node's Czxid %d", lease.Token(), c)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// No request leaves a watch on a node that is gone. An exists request that
// finds no node leaves one, for the node's creation, on the server and in
// go-zookeeper until the session ends, and a lock's nodes come and go: a
// waiter's predecessor leaves, a node that held at once is deleted before
// its watch is read. Here Lockers on connections of their own take,
// wait for and give up one lock; no exists request with a watch is sent.
func TestNoWatchOnAMissingNode(t *testing.T) {
	var watchedExists, gets atomic.Int64
	p := newZKProxy(t, testenv.ZKAddrs(t)[0], 0, func(f []byte) ([]byte, bool) {
		switch opcodeOf(f) {
		case opExists:
			if f[len(f)-1] == 1 { // the request's last field: watch
				watchedExists.Add(1)
			}
		case opGetData:
			gets.Add(1)
		}
		return f, false
	}, nil)
	name := dlocktest.Name(t)
	var wg sync.WaitGroup
	for range 4 {
		l := newLocker(t, testenv.ZK(t, []string{p.addr()}, 10*time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				patience := dlocktest.Timeout
				if i%4 == 3 {
					patience = time.Millisecond // gives up while it waits, now and then
				}
				ctx, cancel := context.WithTimeout(context.Background(), patience)
				lease, err := l.Lock(ctx, name)
				cancel()
				if err != nil {
					if !errors.Is(err, dlock.ErrNotAcquired) {
						t.Error(err)
					}
					continue
				}
				time.Sleep(time.Millisecond)
				if err := lease.Unlock(context.Background()); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if n := watchedExists.Load(); n != 0 {
		t.Errorf("%d exists requests with a watch", n)
	}
	if gets.Load() == 0 {
		t.Error("no node was read: the locks were not taken")
	}
}

// A Locker whose last node had others queued before it makes its next by
// a plain create: the write to the directory that tells a node it is
// first pays only for a lock that is free. Once a queue read finds the
// lock free, the write comes back.
func TestContendedLockerCreatesPlainly(t *testing.T) {
	ops := &opCounter{}
	waiter := newLocker(t, ops.conn(t))
	holder := newLocker(t, testenv.ZK(t, testenv.ZKAddrs(t), 10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	contended := func() {
		held, err := holder.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		got := testenv.LockLater(t, ctx, waiter, name)
		time.Sleep(100 * time.Millisecond) // the waiter queues behind
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if lease := <-got; lease == nil || lease.Unlock(ctx) != nil {
			t.Fatal("the waiter's lease")
		}
	}
	free := func() {
		lease, err := waiter.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	made := func(step func()) (multis, plain int64) {
		m, p := ops.count(opMulti), ops.count(opCreate)
		step()
		return ops.count(opMulti) - m, ops.count(opCreate) - p
	}
	contended() // the first node: a multi, which finds the holder's
	if m, p := made(contended); m != 0 || p != 1 {
		t.Errorf("waiting again: %d multis, %d plain creates; want a plain create", m, p)
	}
	if m, p := made(free); m != 0 || p != 1 {
		t.Errorf("the next Lock, the lock free: %d multis, %d plain creates; want a plain create (the last node waited)", m, p)
	}
	if m, p := made(free); m != 1 || p != 0 {
		t.Errorf("then: %d multis, %d plain creates; want a multi (the last read found the lock free)", m, p)
	}
}
