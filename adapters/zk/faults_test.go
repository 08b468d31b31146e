package zklock_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

const childEnv = "DLOCK_ZK_CRASH_CHILD"

// holdAndHang is the child side of TestHolderKilled: lock, report, hang.
func holdAndHang(name string) {
	die := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	conn, _, err := zk.Connect(strings.Split(os.Getenv("DLOCK_ZK_ADDRS_CHILD"), ","), 2*time.Second)
	if err != nil {
		die(err)
	}
	l, err := zklock.New(conn, root, dlock.WithTTL(2*time.Second))
	if err != nil {
		die(err)
	}
	lease, err := l.Lock(context.Background(), name)
	if err != nil {
		die(err)
	}
	fmt.Printf("LOCKED %d\n", lease.Token())
	select {}
}

func TestMain(m *testing.M) {
	if name := os.Getenv(childEnv); name != "" {
		holdAndHang(name)
	}
	testenv.Main(m)
}

// A holder process killed with SIGKILL: its session expires on the server
// after the session timeout, its node goes with it, and the next waiter
// gets the lock with a larger token. No node is left behind.
func TestHolderKilled(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	name := dlocktest.Name(t)
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childEnv+"="+name, "DLOCK_ZK_ADDRS_CHILD="+strings.Join(addrs, ","))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var childToken uint64
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if tok, ok := strings.CutPrefix(sc.Text(), "LOCKED "); ok {
			childToken, _ = strconv.ParseUint(tok, 10, 64)
			break
		}
	}
	if childToken == 0 {
		t.Fatalf("child did not lock: %v", sc.Err())
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()

	conn := testenv.ZK(t, addrs, 4*time.Second)
	l := newLocker(t, conn, dlock.WithTTL(4*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	lease, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if lease.Token() <= childToken {
		t.Fatalf("token %d after the killed holder's %d", lease.Token(), childToken)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	noOrphans(t, conn)
}

// mntrPackets reads zk_packets_received from the server's mntr.
func mntrPackets(addr string) (int64, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	fmt.Fprint(c, "mntr")
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "zk_packets_received\t"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no zk_packets_received in mntr of %s", addr)
}

func packets(t *testing.T, addr string) int64 {
	t.Helper()
	n, err := mntrPackets(addr)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// With 64 waiters queued, each hand-off costs the server a bounded number
// of requests, whatever the number of waiters: only the next waiter wakes.
// quiet waits until the server at addr has received no request for a
// tenth of a second (a reading itself may count as one packet), and
// returns its packet count.
func quiet(t *testing.T, addr string) int64 {
	before := packets(t, addr)
	for range 50 {
		time.Sleep(100 * time.Millisecond)
		now := packets(t, addr)
		if now-before <= 1 {
			return now
		}
		before = now
	}
	return before
}

func TestHerdFree(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	conn := testenv.ZK(t, addrs[:1], 30*time.Second) // one session: one pinger
	name := dlocktest.Name(t)
	const waiters = 64
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	first, err := newLocker(t, conn).Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	leases := make(chan dlock.Lease, waiters)
	var queued sync.WaitGroup
	for range waiters {
		l := newLocker(t, conn)
		queued.Add(1)
		go func() {
			queued.Done()
			lease, err := l.Lock(ctx, name)
			if err != nil {
				t.Error(err)
				return
			}
			leases <- lease
		}()
	}
	queued.Wait()
	// Wait until all 64 nodes are queued.
	for {
		nodes, _, err := conn.Children(root + "/" + escapeName(name))
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes) == waiters+1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Then until every waiter has set its watch.
	before := quiet(t, addrs[0])
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		lease := <-leases
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	perHandOff := float64(packets(t, addrs[0])-before) / waiters
	t.Logf("%.2f ZooKeeper requests per hand-off with %d waiters", perHandOff, waiters)
	if perHandOff > 3 {
		t.Fatalf("%.2f requests per hand-off: waiters are stampeding", perHandOff)
	}
}
