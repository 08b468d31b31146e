package tablelock_test

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/tablelock"
)

// noIO is a database/sql driver that fails the test's expectations by
// existing: any connection attempt through it is I/O that must not happen.
type noIO struct{}

func (noIO) Open(string) (driver.Conn, error) { return nil, errors.New("noIO: opened a connection") }

func init() { sql.Register("dlock-noio", noIO{}) }

func TestBadInputBeforeIO(t *testing.T) {
	if _, err := tablelock.New(nil); err == nil {
		t.Error("New(nil) accepted a nil *sql.DB")
	}
	// A driver dlock does not know by type: New does no I/O; the first
	// lock asks the server which database it is.
	unknown, _ := sql.Open("dlock-noio", "")
	defer unknown.Close()
	ul, err := tablelock.New(unknown)
	if err != nil {
		t.Fatalf("New with another driver: %v", err)
	}
	defer ul.Close(context.Background())
	if _, err := ul.TryLock(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "SELECT version()") {
		t.Errorf("TryLock over a driver whose server cannot be asked: %v", err)
	}
	// A database that cannot be reached: if any of these did I/O the
	// error would be a connection error, not the validation error.
	unreachable, _ := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	defer unreachable.Close()
	if _, err := tablelock.New(unreachable, dlock.WithTTL(0)); err == nil || !strings.Contains(err.Error(), "MinTTL") {
		t.Errorf("TTL 0: %v", err)
	}
	if _, err := tablelock.New(unreachable, dlock.WithTTL(-time.Second)); err == nil {
		t.Error("negative TTL accepted")
	}
	l, err := tablelock.New(unreachable)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for what, name := range map[string]string{
		"empty": "", "NUL": "a\x00b", "256 bytes": strings.Repeat("n", 256),
	} {
		if _, err := l.Lock(ctx, name); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("Lock(%s) = %v, want ErrInvalidName", what, err)
		}
		if _, err := l.TryLock(ctx, name); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("TryLock(%s) = %v, want ErrInvalidName", what, err)
		}
		if _, _, err := l.Inspect(ctx, name); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("Inspect(%s) = %v, want ErrInvalidName", what, err)
		}
	}
}

// crashChildEnv makes the test binary a lock holder (see crashHolder).
const crashChildEnv = "DLOCK_TABLELOCK_CRASH_CHILD"

// crashHolder is the child side of TestCrash (run from TestMain): it takes
// the lock named in its environment, reports the token and waits to be
// killed.
func crashHolder(spec string) {
	dialect, name, _ := strings.Cut(spec, ":")
	driverName := "pgx"
	if dialect == "mysql" {
		driverName = "mysql"
	}
	db, err := sql.Open(driverName, testenv.DSN(driverName))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	l, err := tablelock.New(db, dlock.WithTTL(time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lease, err := l.Lock(context.Background(), name)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Printf("LOCKED %d\n", lease.Token())
	select {} // killed here
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(crashChildEnv); spec != "" {
		crashHolder(spec)
	}
	testenv.Main(m)
}

// A holder process killed with SIGKILL mid-hold: the lock stays held for
// its TTL (nobody can know the process is gone), then another process
// takes it with a larger token.
func TestCrash(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			name := dlocktest.Name(t)
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), crashChildEnv+"="+d.Name+":"+name)
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
				t.Fatalf("child did not report a lock: %v", sc.Err())
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()

			l := newLocker(t, db)
			if h, held, err := l.Inspect(context.Background(), name); err != nil || !held || h.Token != childToken {
				t.Fatalf("right after the kill: holder %+v held=%v err=%v, want the child's token %d", h, held, err, childToken)
			}
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			lease, err := l.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Unlock(context.Background())
			if lease.Token() <= childToken {
				t.Fatalf("token %d after the crashed holder's %d", lease.Token(), childToken)
			}
		})
	}
}

// Cutting the holder's connections: Done closes, with ErrLost, before the
// lease expires on the server, so the holder stops before anyone else can
// take the lock.
func TestLostRenewal(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			direct := migrated(t, d.Open)
			viaDB, proxy := testenv.ViaProxy(t, d.Name)
			name := dlocktest.Name(t)
			holder := newLocker(t, viaDB, dlock.WithTTL(3*time.Second))
			observer := newLocker(t, direct)
			ctx := context.Background()
			lease, err := holder.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}

			proxy.Cut()
			h, held, err := observer.Inspect(ctx, name)
			if err != nil || !held {
				t.Fatalf("Inspect after the cut: held=%v err=%v", held, err)
			}
			// No later renewal can reach the server. The server counted
			// h.TTL at some moment before Inspect returned, so the lease
			// expires there by now+h.TTL at the latest: a Done after
			// that is a violation, whatever the Inspect's latency was.
			serverExpiry := time.Now().Add(h.TTL)

			select {
			case <-lease.Done():
			case <-time.After(dlocktest.Timeout):
				t.Fatal("Done did not close after the connection was cut")
			}
			if lostAt := time.Now(); !lostAt.Before(serverExpiry) {
				t.Errorf("Done closed %v after the server-side expiry", lostAt.Sub(serverExpiry))
			}
			if err := lease.Err(); !errors.Is(err, dlock.ErrLost) {
				t.Fatalf("Err() = %v, want ErrLost", err)
			}
			if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
				t.Fatalf("Unlock after loss = %v, want ErrNotHeld", err)
			}
			// Once the server lease runs out, another owner takes over.
			next, err := observer.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if next.Token() <= lease.Token() {
				t.Fatalf("token %d after the lost lease's %d", next.Token(), lease.Token())
			}
			next.Unlock(ctx)
		})
	}
}

// Issue "waiters starve holders": with a pool of one connection, a
// waiter's LISTEN connection would leave the holder none to renew with.
// The holder keeps its lease (renewed several times) while a waiter waits,
// and the waiter gets the lock after the holder lets go.
func TestWaitersDoNotStarveHolders(t *testing.T) {
	db := migrated(t, testenv.Postgres)
	db.SetMaxOpenConns(1)
	ttl := 300 * time.Millisecond
	holder, waiter := newLocker(t, db, dlock.WithTTL(ttl)), newLocker(t, db, dlock.WithTTL(ttl))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
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
	// Several renewals while the waiter waits.
	deadline := held.Deadline()
	for range 3 {
		for !held.Deadline().After(deadline) {
			select {
			case <-held.Done():
				t.Fatalf("the holder lost its lease while a waiter waited: %v", held.Err())
			case <-time.After(ttl / 10):
			}
		}
		deadline = held.Deadline()
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiter: %v", err)
	}
}
