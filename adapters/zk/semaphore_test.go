package zklock_test

import (
	"context"
	"errors"
	"fmt"
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

func newSemaphore(t testing.TB, conn *zk.Conn, name string, capacity int) *zklock.Semaphore {
	t.Helper()
	s, err := zklock.NewSemaphore(conn, root, name, capacity)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// leaseNodes lists the lease nodes of the semaphore name.
func leaseNodes(t *testing.T, conn *zk.Conn, name string) []string {
	t.Helper()
	nodes, _, err := conn.Children(root + "/" + escapeName(name) + ".leases")
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	return nodes
}

func TestSemaphoreBadInput(t *testing.T) {
	// A closed connection: any I/O would fail, so these errors come first.
	conn, _, err := zk.Connect([]string{"127.0.0.1:1"}, time.Second, zk.WithLogger(nopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	for _, c := range []struct {
		conn     *zk.Conn
		root     string
		name     string
		capacity int
	}{
		{nil, root, "x", 1},
		{conn, "relative", "x", 1},
		{conn, root, "", 1},
		{conn, root, "x", 0},
		{conn, root, "x", -2},
	} {
		if _, err := zklock.NewSemaphore(c.conn, c.root, c.name, c.capacity); err == nil {
			t.Errorf("NewSemaphore(%v, %q, %q, %d) accepted bad input", c.conn != nil, c.root, c.name, c.capacity)
		}
	}
	s, err := zklock.NewSemaphore(conn, root, "x", 2)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, -1, 3} {
		if _, err := s.TryAcquire(context.Background(), n); err == nil || errors.Is(err, zk.ErrConnectionClosed) {
			t.Errorf("TryAcquire(%d): %v, want a bad-input error before any I/O", n, err)
		}
		if _, err := s.Acquire(context.Background(), n); err == nil || errors.Is(err, zk.ErrConnectionClosed) {
			t.Errorf("Acquire(%d): %v, want a bad-input error before any I/O", n, err)
		}
	}
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func TestSemaphore(t *testing.T) {
	conn := testenv.ZK(t, testenv.ZKAddrs(t), 4*time.Second)
	name := dlocktest.Name(t)
	s := newSemaphore(t, conn, name, 3)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()

	two, err := s.TryAcquire(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if one.Token() <= two.Token() {
		t.Errorf("tokens %d then %d do not increase", two.Token(), one.Token())
	}
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire on a full semaphore: %v, want ErrNotAcquired", err)
	}
	if got := leaseNodes(t, conn, name); len(got) != 2 {
		t.Fatalf("a refused TryAcquire left its node: %v", got)
	}

	// A cancelled Acquire leaves no node behind.
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = s.Acquire(short, 2)
	cancelShort()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its deadline: %v", err)
	}
	if got := leaseNodes(t, conn, name); len(got) != 2 {
		t.Fatalf("a cancelled Acquire left its node: %v", got)
	}

	// A waiter for two permits gets them when two are released.
	got := make(chan dlock.Permit, 1)
	go func() {
		p, err := s.Acquire(ctx, 2)
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	if err := one.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("two permits granted while only one was free")
	case <-time.After(200 * time.Millisecond):
	}
	if err := two.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if p == nil {
		t.FailNow()
	}
	if err := p.Refresh(ctx); err != nil {
		t.Fatalf("Refresh of a held permit: %v", err)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Release(ctx); !errors.Is(err, zklock.ErrUnknownPermit) {
		t.Errorf("second Release: %v, want ErrUnknownPermit", err)
	}
	if err := p.Refresh(ctx); !errors.Is(err, zklock.ErrUnknownPermit) {
		t.Errorf("Refresh after Release: %v, want ErrUnknownPermit", err)
	}
	noOrphans(t, conn)
}

// TestSemaphoreContention: never more than the capacity in use, permits
// do get used in parallel, and every waiter is served.
func TestSemaphoreContention(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	name := dlocktest.Name(t)
	const capacity, workers, rounds = 3, 8, 10
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	var inUse, peak atomic.Int32
	var wg sync.WaitGroup
	for i := range workers {
		s := newSemaphore(t, testenv.ZK(t, addrs, 4*time.Second), name, capacity)
		n := 1 + i%2
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				p, err := s.Acquire(ctx, n)
				if err != nil {
					t.Error(err)
					return
				}
				now := inUse.Add(int32(n))
				if now > capacity {
					t.Errorf("%d permits in use of %d", now, capacity)
				}
				for old := peak.Load(); now > old && !peak.CompareAndSwap(old, now); old = peak.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				inUse.Add(-int32(n))
				if err := p.Release(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if peak.Load() < 2 {
		t.Errorf("permits never used in parallel (peak %d)", peak.Load())
	}
	noOrphans(t, testenv.ZK(t, addrs, 4*time.Second))
}

// TestSemaphoreSessionEnds: the permits of a client whose session ends
// come back to the semaphore, and the holder is told its permit is gone.
func TestSemaphoreSessionEnds(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	name := dlocktest.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	dying := testenv.ZK(t, addrs, 4*time.Second)
	held, err := newSemaphore(t, dying, name, 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newSemaphore(t, testenv.ZK(t, addrs, 4*time.Second), name, 1)
	got := make(chan error, 1)
	go func() {
		p, err := waiter.Acquire(ctx, 1)
		if err == nil {
			if p.Token() <= held.Token() {
				err = fmt.Errorf("token %d after %d", p.Token(), held.Token())
			}
			err = errors.Join(err, p.Release(ctx))
		}
		got <- err
	}()
	dying.Close() // ends the session: its ephemeral nodes go with it
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if err := held.Refresh(ctx); err == nil {
		t.Error("Refresh of a permit whose session ended succeeded")
	}
}

// TestSemaphoreHerdFree: a released permit wakes only the client at the
// head of the queue, so requests per hand-off do not grow with waiters.
func TestSemaphoreHerdFree(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	conn := testenv.ZK(t, addrs[:1], 30*time.Second)
	name := dlocktest.Name(t)
	const waiters = 32
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	first, err := newSemaphore(t, conn, name, 1).Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	permits := make(chan dlock.Permit, waiters)
	for range waiters {
		s := newSemaphore(t, conn, name, 1)
		go func() {
			p, err := s.Acquire(ctx, 1)
			if err != nil {
				t.Error(err)
			}
			permits <- p
		}()
	}
	// Wait until every waiter is queued on the mutex (one of them holds
	// it and waits on the lease directory) and the server is quiet.
	mutexDir := root + "/" + escapeName(name) + ".sem"
	for {
		nodes, _, err := conn.Children(mutexDir)
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
		if len(nodes) == waiters {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	before := quiet(t, addrs[0])
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		p := <-permits
		if p == nil {
			t.FailNow()
		}
		if err := p.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	perHandOff := float64(packets(t, addrs[0])-before) / waiters
	t.Logf("%.2f ZooKeeper requests per permit hand-off with %d waiters", perHandOff, waiters)
	if perHandOff > 10 {
		t.Fatalf("%.2f requests per hand-off: waiters are stampeding", perHandOff)
	}
	noOrphans(t, conn)
}

// The shared contract of dlock.Semaphore, each semaphore on a connection
// of its own.
func TestSemaphoreConformance(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	dlocktest.RunSemaphore(t, dlocktest.SemaphoreHarness{
		New: func(t *testing.T, name string, capacity int) dlock.Semaphore {
			return newSemaphore(t, testenv.ZK(t, addrs, 10*time.Second), name, capacity)
		},
	})
}

// Permits last as long as their session: a TTL, or any option but
// WithACL, is refused rather than ignored.
func TestSemaphoreRefusesOptionsItIgnores(t *testing.T) {
	conn := &zk.Conn{} // never used: the constructor refuses first
	for what, opt := range map[string]dlock.Option{
		"WithTTL":          dlock.WithTTL(time.Minute),
		"WithoutAutoRenew": dlock.WithoutAutoRenew(),
		"WithHandOffs":     dlock.WithHandOffs(0),
	} {
		if _, err := zklock.NewSemaphore(conn, "/dlock", "s", 2, opt); err == nil {
			t.Errorf("NewSemaphore with %s: accepted", what)
		}
	}
	if _, err := zklock.NewSemaphore(conn, "/dlock", "s", 2, zklock.WithACL(zk.WorldACL(zk.PermAll))); err != nil {
		t.Errorf("NewSemaphore with WithACL: %v", err)
	}
}

// Curator's testNoOrphanedNodes for semaphores: a waiter whose lease node
// is deleted (by an operator, or a cleanup of another client) while its
// session lives joins the queue again and gets its permit when one frees,
// instead of failing as if its session had expired.
func TestSemaphoreWaiterRejoinsWhenItsNodeIsDeleted(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	conn, admin := testenv.ZK(t, addrs, 4*time.Second), testenv.ZK(t, addrs, 4*time.Second)
	name := dlocktest.Name(t)
	s := newSemaphore(t, conn, name, 1)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	held, err := s.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		p, err := s.Acquire(ctx, 1)
		if err == nil {
			err = p.Release(ctx)
		}
		got <- err
	}()
	var waiting string
	dlocktest.Eventually(t, func() bool {
		for _, n := range leaseNodes(t, admin, name) {
			if root+"/"+escapeName(name)+".leases/"+n != held.ID() {
				waiting = n
			}
		}
		return waiting != ""
	}, "the waiter's lease node")
	if err := admin.Delete(root+"/"+escapeName(name)+".leases/"+waiting, -1); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		t.Fatalf("the waiter returned while the permit was held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter whose node was deleted: %v", err)
	}
}
