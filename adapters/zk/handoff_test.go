package zklock_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// opCounter counts the requests of the connections it dials, by opcode,
// read off the frames the client writes (go-zookeeper has no hook for
// requests).
type opCounter struct {
	mu  sync.Mutex
	ops map[int32]int64
}

func (c *opCounter) count(ops ...int32) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int64
	for _, op := range ops {
		n += c.ops[op]
	}
	return n
}

// writes is a dlocktest.Requests: the creates, deletes and multis sent.
func (c *opCounter) writes(context.Context) (int64, error) {
	return c.count(opCreate, opDelete, opMulti), nil
}

// conn connects to ZooKeeper through c; t.Cleanup closes the connection.
func (c *opCounter) conn(t *testing.T) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect(testenv.ZKAddrs(t), 30*time.Second, zk.WithDialer(c.dial), zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	for ev := range events {
		if ev.State == zk.StateHasSession {
			go func() {
				for range events {
				}
			}()
			return conn
		}
	}
	t.Fatal("no ZooKeeper session")
	return nil
}

func (c *opCounter) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	nc, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: nc, c: c}, nil
}

// countingConn splits what the client writes into frames (a 4-byte
// length, then the body). Every frame but the first, the connect request,
// starts with a request header: xid, then opcode.
type countingConn struct {
	net.Conn
	c      *opCounter
	mu     sync.Mutex
	buf    []byte
	frames int
}

func (cc *countingConn) Write(p []byte) (int, error) {
	cc.mu.Lock()
	cc.buf = append(cc.buf, p...)
	for len(cc.buf) >= 4 {
		n := int(binary.BigEndian.Uint32(cc.buf))
		if len(cc.buf) < 4+n {
			break
		}
		if frame := cc.buf[4 : 4+n]; cc.frames > 0 && len(frame) >= 8 {
			cc.c.mu.Lock()
			if cc.c.ops == nil {
				cc.c.ops = map[int32]int64{}
			}
			op := int32(binary.BigEndian.Uint32(frame[4:8]))
			cc.c.ops[op]++
			if op == opMulti && len(frame) >= 12 && int32(binary.BigEndian.Uint32(frame[8:12])) == opDelete {
				cc.c.ops[opHandOff]++
			}
			cc.c.mu.Unlock()
		}
		cc.frames++
		cc.buf = cc.buf[4+n:]
	}
	cc.mu.Unlock()
	return cc.Conn.Write(p)
}

// Call chains sharing a Locker hand the lock on to each other with one
// write per hold (a multi that swaps the nodes), with increasing tokens;
// with hand-offs off a hold costs a create and a delete.
func TestHandOff(t *testing.T) {
	ops := &opCounter{}
	conn := ops.conn(t)
	for _, limit := range []int{dlock.DefaultHandOffs, 0} {
		multis := ops.count(opHandOff)
		perHold := testenv.StatementsPerHold(t, newLocker(t, conn, dlock.WithHandOffs(limit)), ops.writes, fmt.Sprint(limit))
		multis = ops.count(opHandOff) - multis
		t.Logf("WithHandOffs(%d): %.2f writes per hold, %d hand-offs", limit, perHold, multis)
		switch {
		case limit > 0 && (perHold > 1.3 || multis == 0):
			t.Errorf("WithHandOffs(%d): %.2f writes per hold and %d multis, want at most 1.3 and some: the lock is not handed on", limit, perHold, multis)
		case limit == 0 && (perHold < 2 || multis > 0):
			t.Errorf("WithHandOffs(0): %.2f writes per hold and %d multis, want at least 2 and none", perHold, multis)
		}
	}
	noOrphans(t, conn)
}

// Call chains that waited for another process's hold hand the lock on to
// each other once it comes to them: one write per hold.
func TestHandOffAfterWaiting(t *testing.T) {
	ops := &opCounter{}
	shared := newLocker(t, ops.conn(t))
	other := newLocker(t, testenv.ZK(t, testenv.ZKAddrs(t), 30*time.Second))
	testenv.CheckHandsOnAfterWaiting(t, shared, other, ops.writes)
}

// A process whose goroutines pass the lock from one to the next lets
// another process in: its node queues behind the holder's, and the next
// hand-off finds it there.
func TestHandOffLetsAnotherProcessIn(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	testenv.LetsAnotherIn(t, newLocker(t, testenv.ZK(t, addrs, 30*time.Second)), newLocker(t, testenv.ZK(t, addrs, 30*time.Second)))
}

// When another process queued behind the holder, a hand-off grants it the
// lock, first come, first served: the multi that deletes the holder's node
// queues the next chain's behind the other process's, which holds next,
// and the chain's node is deleted again. The holder's Unlock succeeds
// (its node is gone by the hand-off, not lost), tokens increase, and no
// node is left behind.
func TestHandOffYieldsToAnotherProcessQueued(t *testing.T) {
	ops := &opCounter{}
	conn := ops.conn(t)
	testenv.HandOffYields(t, newLocker(t, conn), newLocker(t, testenv.ZK(t, testenv.ZKAddrs(t), 30*time.Second)),
		func(name string) bool {
			nodes, _, err := conn.Children(root + "/" + escapeName(name))
			return err == nil && len(nodes) == 2
		},
		func() int64 { return ops.count(opHandOff) }, 1)
	noOrphans(t, conn)
}

// A hold handed on (one multi request at the Unlock) is the new owner's on
// the server: Inspect shows its owner and token, and the token is the
// Czxid of a node that holds. With no other process queued the hand-off
// costs two requests: the multi, whose reply tells that the new node is
// the only one and its Czxid (see makeNode), and the read that watches
// the new node.
func TestHandedOnHoldInspected(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	ops := &opCounter{}
	conn := ops.conn(t)
	l := newLocker(t, conn)
	name := dlocktest.Name(t)
	first, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := testenv.LockLater(t, ctx, l, name)
	time.Sleep(100 * time.Millisecond) // the second chain queues in the process
	before, requests := ops.count(opCreate, opDelete, opMulti), ops.requests()
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if n, multis := ops.count(opCreate, opDelete, opMulti)-before, ops.count(opHandOff); n != 1 || multis != 1 {
		t.Fatalf("%d writes from the Unlock to the next hold, %d of them multis; want the one multi of a hand-off", n, multis)
	}
	if second == nil {
		t.FailNow()
	}
	time.Sleep(100 * time.Millisecond) // a late request would be counted
	if n := ops.requests() - requests; n != 2 {
		t.Errorf("%d requests for the hand-off, want 2: the multi and the new node's watch", n)
	}
	h, held, err := l.Inspect(ctx, name)
	if err != nil || !held {
		t.Fatalf("Inspect after the hand-off: held %v, err %v", held, err)
	}
	if h.Token != second.Token() || second.Token() <= first.Token() {
		t.Errorf("Inspect: token %d; the leases' %d then %d", h.Token, first.Token(), second.Token())
	}
	if h.Owner != second.Owner() {
		t.Errorf("Inspect: owner %q after the hand-off to %q", h.Owner, second.Owner())
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	noOrphans(t, conn)
}
