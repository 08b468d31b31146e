package advisory_test

import (
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/migrations"
)

// On MySQL a Lock that finds the lock held waits in the server's queue
// with one call (dlock_wait_lock) that also draws the token: once the
// holder unlocks, the waiter holds the lock and knows its token without
// another statement, and Inspect names it.
func TestWaitIsOneCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	db := migrated(t, testenv.MySQL)
	var counter testenv.MySQLCounter
	waiter := newLocker(t, counter.Open(t), dlock.WithOwner("waiter"))
	checkWait(ctx, t, db, newLocker(t, db), waiter, counter.Requests(), 0)
}

// A MySQL schema without dlock_wait_lock (migration 000005 not applied
// yet) keeps working: the wait takes GET_LOCK and a statement for the
// token after the grant, and a warning says so, once.
func TestWaitWithoutProcedure(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	dsn := testenv.FreshDSN(t, "mysql")
	db := testenv.Open(t, "mysql", dsn)
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DROP PROCEDURE dlock_wait_lock"); err != nil {
		t.Fatal(err)
	}
	var counter testenv.MySQLCounter
	var log testenv.Buffer
	holder := newLocker(t, db)
	waiter := newLocker(t, counter.OpenDSN(t, dsn), dlock.WithOwner("waiter"), dlock.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	for range 2 {
		checkWait(ctx, t, db, holder, waiter, counter.Requests(), 1)
	}
	if n := lines(log.String(), "dlock_wait_lock"); n != 1 {
		t.Errorf("%d warnings about dlock_wait_lock, want 1:\n%s", n, log.String())
	}
}

// checkWait has holder hold a name while waiter, whose statements count
// counts, waits for it; once the holder unlocks, the waiter must hold the
// lock with a larger token, shown by Inspect, after wantAfter statements
// of its own. admin is a database of the same server.
func checkWait(ctx context.Context, t *testing.T, admin *sql.DB, holder, waiter *advisory.Locker, count dlocktest.Requests, wantAfter int64) {
	t.Helper()
	name := dlocktest.Name(t)
	first, err := holder.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease dlock.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		lease, err := waiter.Lock(ctx, name)
		got <- result{lease, err}
	}()
	dlocktest.Eventually(t, func() bool { return waiters(ctx, t, admin, "mysql", name) > 0 }, "the waiter in the server's queue")
	before, _ := count(ctx)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.lease.Unlock(ctx)
	after, _ := count(ctx)
	if after-before != wantAfter {
		t.Errorf("%d statements after the grant, want %d", after-before, wantAfter)
	}
	if r.lease.Token() <= first.Token() {
		t.Errorf("token %d after %d", r.lease.Token(), first.Token())
	}
	h, held, err := holder.Inspect(ctx, name)
	if err != nil || !held || h.Owner != r.lease.Owner() || h.Token != r.lease.Token() {
		t.Errorf("Inspect: %+v, %v, %v; want %s with token %d", h, held, err, r.lease.Owner(), r.lease.Token())
	}
}

// waiters counts the sessions of db's server, of dialect ("postgres" or
// "mysql"), that wait for name's lock.
func waiters(ctx context.Context, t testing.TB, db *sql.DB, dialect, name string) int {
	var n int
	var err error
	if dialect == "postgres" {
		key := uint64(advisory.PostgresKey(name))
		err = db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND classid = $1 AND objid = $2 AND objsubid = 1`,
			int64(key>>32), int64(key&0xffffffff)).Scan(&n)
	} else {
		err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.PROCESSLIST
			WHERE STATE = 'User lock' AND (INFO LIKE CONCAT('%', HEX(?), '%') OR INFO LIKE CONCAT('%', LOWER(HEX(?)), '%'))`,
			advisory.MySQLName(name), advisory.MySQLName(name)).Scan(&n)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A Lock waiting in the server's queue when the link to the server goes
// silent returns by its ctx, as any Lock does, and its wait does not hold
// up the Locker's Close: when the server does not confirm that it ended
// the waiting session, the wait's connection is given up.
func TestWaitOnSilentLink(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			direct := migrated(t, d.Open)
			viaDB, proxy := testenv.ViaProxy(t, d.Name)
			defer proxy.Restore()
			name := dlocktest.Name(t)
			lease, err := newLocker(t, direct).Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Unlock(ctx)
			waiter := newLocker(t, viaDB)
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			locked := make(chan error, 1)
			go func() {
				_, err := waiter.Lock(lctx, name)
				locked <- err
			}()
			dlocktest.Eventually(t, func() bool { return waiters(ctx, t, direct, d.Name, name) > 0 }, "the waiter in the server's queue")
			proxy.Blackhole()
			cancel()
			if err := <-locked; err == nil {
				t.Fatal("Lock took a lock that is held")
			}
			closed := make(chan error, 1)
			go func() { closed <- waiter.Close(ctx) }()
			select {
			case <-closed:
			case <-time.After(dlocktest.Timeout):
				t.Fatalf("Close still waits, %v after the waiting Lock was cancelled", dlocktest.Timeout)
			}
		})
	}
}

// lines counts the lines of log that mention s.
func lines(log, s string) int {
	n := 0
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}
