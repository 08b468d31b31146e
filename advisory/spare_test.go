package advisory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// On MySQL a released session is kept a moment, its idle timeout still
// set, for the Locker's next hold: a lock and unlock then cost one
// statement each, as GET_LOCK and RELEASE_LOCK do, instead of four (each
// with a SET of the timeout). Lock, which waits in the server's queue
// when the lock is held, costs no more than TryLock.
func TestSpareSessionSavesStatements(t *testing.T) {
	for _, take := range takes {
		t.Run(take.name, func(t *testing.T) {
			var counter testenv.MySQLCounter
			db := migrated(t, counter.Open)
			count := counter.Requests()
			l := newLocker(t, db)
			ctx := context.Background()
			name := dlocktest.Name(t)
			const cycles = 20
			before, _ := count(ctx)
			for range cycles {
				lease, err := take.lock(l, ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			after, _ := count(ctx)
			perCycle := float64(after-before) / cycles
			t.Logf("%.2f statements per lock and unlock", perCycle)
			if perCycle > 2.5 {
				t.Errorf("%.2f statements per lock and unlock, want about 2: the session is not kept", perCycle)
			}
		})
	}
}

// takes are the two ways to take a lock, for the tests that run both.
var takes = []struct {
	name string
	lock func(dlock.Locker, context.Context, string) (dlock.Lease, error)
}{
	{"TryLock", dlock.Locker.TryLock},
	{"Lock", dlock.Locker.Lock},
}

// A kept session goes back to the pool within a moment, with the server's
// idle timeout restored: the application's own queries on the pool must
// not run with a lease's timeout.
func TestSpareSessionGoesBack(t *testing.T) {
	db := migrated(t, testenv.MySQL)
	db.SetMaxOpenConns(2)
	l := newLocker(t, db, dlock.WithTTL(3*time.Second))
	ctx := context.Background()
	lease, err := l.TryLock(ctx, dlocktest.Name(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	dlocktest.Eventually(t, func() bool { return db.Stats().InUse == 0 }, "the session back in the pool")
	for i := range 2 { // every connection the pool may hand out
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var session, global int
		if err := conn.QueryRowContext(ctx, "SELECT @@SESSION.wait_timeout, @@GLOBAL.wait_timeout").Scan(&session, &global); err != nil {
			t.Fatal(err)
		}
		if session != global {
			t.Errorf("connection %d: wait_timeout %d, want the server's %d", i, session, global)
		}
	}
}

// The last free connection of a bounded pool goes back at once, and Close
// gives back what the Locker kept.
func TestSpareSessionLeavesThePool(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		maxOpen  int
		closeToo bool
	}{
		{"one connection", 1, false},
		{"Close", 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := migrated(t, testenv.MySQL)
			db.SetMaxOpenConns(c.maxOpen)
			l, err := advisory.New(db, dlock.WithTTL(time.Hour)) // no give-back in the test's time
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close(ctx)
			lease, err := l.TryLock(ctx, dlocktest.Name(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if c.closeToo {
				if err := l.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if n := db.Stats().InUse; n != 0 {
				t.Errorf("%d connections still in use", n)
			}
		})
	}
}

// A kept session the server ended meanwhile costs the next lock nothing:
// it is tried on a fresh connection.
func TestKilledSpareSession(t *testing.T) {
	for _, take := range takes {
		t.Run(take.name, func(t *testing.T) {
			db := migrated(t, testenv.MySQL)
			admin := testenv.MySQL(t)
			l := newLocker(t, db)
			ctx := context.Background()
			name := dlocktest.Name(t)
			lease, err := take.lock(l, ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			var session int64
			if err := admin.QueryRowContext(ctx, "SELECT session FROM dlock_fences WHERE name = ?", name).Scan(&session); err != nil {
				t.Fatal(err)
			}
			token := lease.Token()
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", session)); err != nil {
				t.Fatal(err)
			}
			lease, err = take.lock(l, ctx, name)
			if err != nil {
				t.Fatalf("%s after the kept session was killed: %v", take.name, err)
			}
			if lease.Token() <= token {
				t.Errorf("token %d after %d", lease.Token(), token)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
