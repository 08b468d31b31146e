package zklock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/election"
	"github.com/dlockhq/dlock/internal/testenv"
)

// The Java fleet next door: Curator's recipes (Debian's
// libcurator-recipes-java, run by testdata/curator/Interop.java) and
// zklock on the same ZooKeeper paths. A zklock mutex and Curator's
// InterProcessMutex exclude each other both ways, and an election over a
// zklock Locker excludes Curator's LeaderSelector: they are the same
// recipe (protected "-lock-" nodes, the lowest sequence holds, each
// waiter watches the node before it).

// curatorSession is the Java client's session timeout, and the Go
// Lockers' TTL and session timeout.
const curatorSession = 4 * time.Second

// curatorJars is the class path of Debian's Curator and its dependencies.
var curatorJars = []string{
	"curator-recipes", "curator-framework", "curator-client", "zookeeper", "zookeeper-jute",
	"guava", "slf4j-api", "slf4j-nop", "netty-handler", "netty-transport", "netty-common",
	"netty-resolver", "netty-buffer", "netty-codec",
}

// javaCurator is a JVM running Interop.java: one Curator client, one
// ZooKeeper session.
type javaCurator struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin *bufio.Writer
	lines chan string
}

// startCurator starts a Curator client connected to addr.
func startCurator(t *testing.T, addr string) *javaCurator {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		testenv.Unavailable(t, "Java", "PATH", "PATH", err)
	}
	cp := make([]string, len(curatorJars))
	for i, jar := range curatorJars {
		cp[i] = filepath.Join("/usr/share/java", jar+".jar")
		if _, err := os.Stat(cp[i]); err != nil {
			testenv.Unavailable(t, "Curator (Debian's libcurator-recipes-java)", cp[i], "PATH", err)
		}
	}
	cmd := exec.Command(java, "-cp", strings.Join(cp, ":"), filepath.Join("testdata", "curator", "Interop.java"),
		addr, strconv.Itoa(int(curatorSession.Milliseconds())))
	cmd.Stderr = testWriter{t}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	j := &javaCurator{t: t, cmd: cmd, stdin: bufio.NewWriter(stdin), lines: make(chan string, 16)}
	go func() {
		defer close(j.lines)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			j.lines <- s.Text()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if line := j.next(60 * time.Second); line != "ready" {
		t.Fatalf("Curator client: %q, want ready", line)
	}
	return j
}

// testWriter logs the JVM's stderr.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("java: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

// send writes one command.
func (j *javaCurator) send(format string, args ...any) {
	j.t.Helper()
	fmt.Fprintf(j.stdin, format+"\n", args...)
	if err := j.stdin.Flush(); err != nil {
		j.t.Fatalf("Curator client: %v", err)
	}
}

// next returns the next reply, failing the test after wait.
func (j *javaCurator) next(wait time.Duration) string {
	j.t.Helper()
	select {
	case line, ok := <-j.lines:
		if !ok {
			j.t.Fatal("Curator client exited")
		}
		return line
	case <-time.After(wait):
		j.t.Fatalf("Curator client: no reply within %v", wait)
		return ""
	}
}

// acquire runs InterProcessMutex.acquire(wait) on path; it reports
// whether Curator got the lock, and when (the JVM's wall clock).
func (j *javaCurator) acquire(path string, wait time.Duration) (time.Time, bool) {
	j.t.Helper()
	j.send("acquire %s %d", path, wait.Milliseconds())
	return j.acquired(j.next(wait + 30*time.Second))
}

// acquired reads an "acquired MICROS" or "timeout" reply.
func (j *javaCurator) acquired(line string) (time.Time, bool) {
	j.t.Helper()
	if line == "timeout" {
		return time.Time{}, false
	}
	us, ok := strings.CutPrefix(line, "acquired ")
	if !ok {
		us, ok = strings.CutPrefix(line, "leading ")
	}
	n, err := strconv.ParseInt(us, 10, 64)
	if !ok || err != nil {
		j.t.Fatalf("Curator client: %q", line)
	}
	return time.UnixMicro(n), true
}

// release runs InterProcessMutex.release on path.
func (j *javaCurator) release(path string) {
	j.t.Helper()
	j.send("release %s", path)
	if line := j.next(30 * time.Second); line != "released" {
		j.t.Fatalf("Curator release: %q", line)
	}
}

// curatorRoot is a root of its own for a test, and the Curator path of
// name under it (zklock's directory for a name of [A-Za-z0-9_-]).
func curatorRoot() string { return fmt.Sprintf("/dlock-curator-%d", time.Now().UnixNano()) }

// mustRefuse checks that TryLock of name on l is refused as held.
func mustRefuse(t *testing.T, l dlock.Locker, name, while string) {
	t.Helper()
	lease, err := l.TryLock(context.Background(), name)
	if err == nil {
		_ = lease.Unlock(context.Background())
		t.Fatalf("zklock took %q while %s", name, while)
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock while %s: %v, want ErrNotAcquired", while, err)
	}
}

func TestCuratorMutex(t *testing.T) {
	addr := testenv.ZKAddrs(t)[0]
	root := curatorRoot()
	path := root + "/m"
	l := newLockerAt(t, testenv.ZK(t, []string{addr}, curatorSession), root)
	j := startCurator(t, addr)
	ctx := context.Background()

	// Curator first: zklock waits for it.
	if _, ok := j.acquire(path, 5*time.Second); !ok {
		t.Fatal("Curator could not take a free lock")
	}
	mustRefuse(t, l, "m", "Curator holds it")
	granted := make(chan dlock.Lease, 1)
	go func() {
		lease, err := l.Lock(ctx, "m")
		if err != nil {
			t.Error(err)
		}
		granted <- lease
	}()
	select {
	case <-granted:
		t.Fatal("zklock's Lock returned while Curator held the lock")
	case <-time.After(500 * time.Millisecond):
	}
	j.release(path)
	var lease dlock.Lease
	select {
	case lease = <-granted:
	case <-time.After(10 * time.Second):
		t.Fatal("zklock's Lock was not granted after Curator released")
	}
	if lease == nil {
		t.FailNow()
	}

	// zklock first, re-entered: Curator waits for both releases.
	inner, err := l.Lock(dlock.ContextWithLease(ctx, lease), "m")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := j.acquire(path, 300*time.Millisecond); ok {
		t.Fatal("Curator took the lock zklock holds")
	}
	if err := inner.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := j.acquire(path, 300*time.Millisecond); ok {
		t.Fatal("Curator took the lock zklock still holds (one re-entry released)")
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := j.acquire(path, 5*time.Second); !ok {
		t.Fatal("Curator could not take the lock zklock released")
	}

	// Curator re-enters: zklock waits for both releases.
	if _, ok := j.acquire(path, 5*time.Second); !ok {
		t.Fatal("Curator could not re-enter its lock")
	}
	j.release(path)
	mustRefuse(t, l, "m", "Curator holds it once more")
	j.release(path)
	lease, err = l.TryLock(ctx, "m")
	if err != nil {
		t.Fatalf("TryLock after Curator's last release: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCuratorSessionExpiry(t *testing.T) {
	addr := testenv.ZKAddrs(t)[0]
	root := curatorRoot()
	path := root + "/m"
	ctx := context.Background()

	t.Run("CuratorHolderDies", func(t *testing.T) {
		l := newLockerAt(t, testenv.ZK(t, []string{addr}, curatorSession), root, dlock.WithTTL(curatorSession))
		j := startCurator(t, addr)
		if _, ok := j.acquire(path, 5*time.Second); !ok {
			t.Fatal("Curator could not take a free lock")
		}
		mustRefuse(t, l, "m", "Curator holds it")
		killed := time.Now()
		if err := j.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 6*curatorSession)
		defer cancel()
		lease, err := l.Lock(wctx, "m")
		if err != nil {
			t.Fatalf("Lock after the Curator holder's session should have expired: %v", err)
		}
		t.Logf("granted %v after the JVM was killed (session timeout %v)", time.Since(killed).Round(time.Millisecond), curatorSession)
		_ = lease.Unlock(ctx)
	})

	// A zklock holder cut off from ZooKeeper learns that its lease is
	// over (Done) before Curator is granted the lock its session held.
	t.Run("ZklockHolderCutOff", func(t *testing.T) {
		proxy := testenv.NewProxy(t, addr)
		l := newLockerAt(t, testenv.ZK(t, []string{proxy.Addr()}, curatorSession), root, dlock.WithTTL(curatorSession))
		j := startCurator(t, addr)
		lease, err := l.Lock(ctx, "m")
		if err != nil {
			t.Fatal(err)
		}
		doneAt := make(chan time.Time, 1)
		go func() {
			<-lease.Done()
			doneAt <- time.Now()
		}()
		j.send("acquire %s %d", path, (10 * curatorSession).Milliseconds())
		time.Sleep(500 * time.Millisecond)
		proxy.Cut()
		grantedAt, ok := j.acquired(j.next(12 * curatorSession))
		if !ok {
			t.Fatal("Curator was not granted the lock of an expired session")
		}
		select {
		case done := <-doneAt:
			if !done.Before(grantedAt) {
				t.Fatalf("the zklock holder's Done closed at %v, after Curator was granted at %v", done, grantedAt)
			}
			t.Logf("Done closed %v before Curator's grant", grantedAt.Sub(done).Round(time.Millisecond))
		default:
			t.Fatal("Curator was granted while the zklock holder's Done was open")
		}
		if !errors.Is(lease.Err(), dlock.ErrLost) {
			t.Fatalf("lease.Err() = %v, want ErrLost", lease.Err())
		}
		j.release(path)
	})
}

// TestCuratorLeaderSelector: an election over a zklock Locker and
// Curator's LeaderSelector on the same path elect one leader between
// them, and each takes over when the other resigns.
func TestCuratorLeaderSelector(t *testing.T) {
	addr := testenv.ZKAddrs(t)[0]
	root := curatorRoot()
	path := root + "/leader"
	ctx := context.Background()
	l := newLockerAt(t, testenv.ZK(t, []string{addr}, curatorSession), root, dlock.WithTTL(curatorSession))
	e, err := election.New(l, "leader")
	if err != nil {
		t.Fatal(err)
	}
	j := startCurator(t, addr)

	lead, err := e.Campaign(ctx, "go")
	if err != nil {
		t.Fatal(err)
	}
	j.send("lead %s", path)
	select {
	case line := <-j.lines:
		t.Fatalf("Curator %q while the election's leader leads", line)
	case <-time.After(time.Second):
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := j.acquired(j.next(10 * time.Second)); !ok {
		t.Fatal("Curator's LeaderSelector did not lead")
	}

	// Curator leads: the election's candidate waits, and sees a leader.
	if got, err := e.Leader(ctx); err != nil {
		t.Fatalf("Leader while Curator leads: %v", err)
	} else if got.Term == 0 {
		t.Fatalf("Leader while Curator leads: %+v, want its term", got)
	}
	won := make(chan *election.Leadership, 1)
	go func() {
		l, err := e.Campaign(ctx, "go")
		if err != nil {
			t.Error(err)
		}
		won <- l
	}()
	select {
	case <-won:
		t.Fatal("the election's candidate won while Curator leads")
	case <-time.After(time.Second):
	}
	j.send("resign %s", path)
	if line := j.next(30 * time.Second); line != "resigned" {
		t.Fatalf("Curator resign: %q", line)
	}
	select {
	case lead = <-won:
		if lead == nil {
			t.FailNow()
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the election's candidate did not win after Curator resigned")
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

// newLockerAt is newLocker under a root of the test's own.
func newLockerAt(t testing.TB, conn *zk.Conn, root string, opts ...dlock.Option) *zklock.Locker {
	t.Helper()
	l, err := zklock.New(conn, root, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}
