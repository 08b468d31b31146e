package tablelock_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/migrations"
)

// On PostgreSQL a release grants the lock to the next waiter only for a
// term that ends no later than the hold it replaces, and commits without
// waiting for its WAL flush; when that term would be less than half the
// one asked for, it wakes the waiter, whose own attempt takes the lock
// and waits for its flush. The waiters here ask for a minute (their
// place in the queue, with slowPoll, is longer), so the holder's TTL
// decides which: 45 s left is at least half a minute, 20 s is not.

// grant is what grantAfter saw: the replaced hold's expiry and the
// grant's, on the server, and the waiter's lease.
type grant struct {
	replaced, expiry time.Time
	lease            dlock.Lease
}

// grantAfter holds a name in one process for ttl, without renewal (its
// expiry stays put), queues a waiter of another process that asks for a
// minute, and releases.
func grantAfter(t *testing.T, ttl time.Duration) grant {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	admin := testenv.Postgres(t)
	name := dlocktest.Name(t)
	first, err := newLocker(t, process(t, nil), dlock.WithTTL(ttl), dlock.WithoutAutoRenew()).Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	next := waitFor(ctx, newLocker(t, process(t, nil), slowPoll, dlock.WithTTL(time.Minute)), name)
	queued(t, ctx, admin, name, 1)
	g := grant{replaced: serverExpiry(t, ctx, admin, name)}
	g.lease = handedOn(t, ctx, first, next, "queued for a grant")
	t.Cleanup(func() { _ = g.lease.Unlock(context.Background()) })
	g.expiry = serverExpiry(t, ctx, admin, name)
	return g
}

// A grant that may be lost with its commit ends with the hold it
// replaces: on the server, and the waiter's lease before it.
func TestLazyGrantEndsWithTheHoldItReplaces(t *testing.T) {
	g := grantAfter(t, 45*time.Second)
	if g.expiry.After(g.replaced) {
		t.Errorf("the grant expires at %v, after the hold it replaced (%v)", g.expiry, g.replaced)
	}
	if !g.lease.Deadline().Before(g.replaced) {
		t.Errorf("the granted lease ends at %v, not before the replaced hold's expiry %v", g.lease.Deadline(), g.replaced)
	}
	if left := time.Until(g.lease.Deadline()); left < 30*time.Second {
		t.Errorf("the granted lease has %v left, less than half the minute asked for", left)
	}
}

// A waiter that would be granted much less than it asked for takes the
// lock itself instead, for its whole TTL (and its attempt waits for its
// flush, see TestGrantWaitsForTheStandby).
func TestGrantOutlastingTheHoldGetsItsTerm(t *testing.T) {
	g := grantAfter(t, 20*time.Second)
	if !g.lease.Deadline().After(g.replaced.Add(30 * time.Second)) {
		t.Errorf("the granted lease ends at %v, cut to the replaced hold's expiry %v", g.lease.Deadline(), g.replaced)
	}
}

// On a primary whose synchronous standby never answers, a commit that
// waits for its flush waits (in pg_stat_activity, wait_event SyncRep)
// until the client gives up on it. A release that grants the lock within
// the replaced hold does not wait, nor does a hand-off between the
// goroutines of a process. A release that would grant past the hold does
// not wait either: it grants nothing, and the waiter's own attempt waits
// until the primary stops waiting for the standby.
func TestGrantWaitsForTheStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	srv := testenv.PostgresServer(t)
	admin := testenv.Open(t, srv.Driver, srv.DSN)
	if err := migrations.Up(ctx, admin); err != nil {
		t.Fatal(err)
	}
	proc := func() *sql.DB { return testenv.Open(t, srv.Driver, srv.DSN) }
	name := dlocktest.Name(t)

	first, err := newLocker(t, proc(), dlock.WithTTL(45*time.Second), dlock.WithoutAutoRenew()).Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	next := waitFor(ctx, newLocker(t, proc(), slowPoll, dlock.WithTTL(time.Minute)), name)
	queued(t, ctx, admin, name, 1)
	shared := newLocker(t, proc(), dlock.WithTTL(time.Minute))
	other, err := shared.Lock(ctx, "other-"+name)
	if err != nil {
		t.Fatal(err)
	}
	handed := waitFor(ctx, shared, "other-"+name)
	time.Sleep(100 * time.Millisecond) // the goroutine queues behind the hold, in the process
	standby(t, ctx, admin, "ghost")

	var granted dlock.Lease
	if waitedForStandby(t, ctx, admin, "%", func() {
		granted = handedOn(t, ctx, first, next, "with the standby away")
		if err := other.Unlock(ctx); err != nil {
			t.Errorf("Unlock handing on within the process: %v", err)
		}
		if lease := <-handed; lease == nil {
			t.Error("the process's next goroutine did not get the lock")
		}
	}) {
		t.Error("a grant within the replaced hold waited for the standby")
	}

	// The next waiter asks for two minutes, four times what the
	// granted hold has left.
	last := waitFor(ctx, newLocker(t, proc(), slowPoll, dlock.WithTTL(2*time.Minute)), name)
	queued(t, ctx, admin, name, 1)
	if waitedForStandby(t, ctx, admin, "%released AS (%", func() { _ = granted.Unlock(ctx) }) {
		t.Error("a release waited for the standby")
	}
	dlocktest.Eventually(t, func() bool { return waitingForStandby(ctx, admin, "%taken AS (%") },
		"the woken waiter's attempt waits for the standby")
	select {
	case <-last:
		t.Fatal("the waiter got the lock while its attempt could not commit")
	default:
	}
	standby(t, ctx, admin, "")
	if lease := <-last; lease == nil {
		t.Fatal("the last waiter did not get the lock")
	}
}

// waitingForStandby reports whether a statement like like (a LIKE
// pattern) waits for the synchronous standby.
func waitingForStandby(ctx context.Context, admin *sql.DB, like string) bool {
	var n int
	err := admin.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE $1", like).Scan(&n)
	return err == nil && n > 0
}

// waitedForStandby runs do and reports whether a statement like like (a
// LIKE pattern) waited for the synchronous standby meanwhile. Such a
// wait lasts until the client gives up on the request
// (dlock.CancelMargin at least), many times the sampling interval.
func waitedForStandby(t *testing.T, ctx context.Context, admin *sql.DB, like string, do func()) bool {
	t.Helper()
	done := make(chan struct{})
	seen := make(chan bool, 1)
	go func() {
		waited := false
		for {
			select {
			case <-done:
				seen <- waited
				return
			case <-ctx.Done():
				seen <- waited
				return
			default:
			}
			if waitingForStandby(ctx, admin, like) {
				waited = true
			}
			time.Sleep(time.Millisecond)
		}
	}()
	func() {
		defer close(done) // also when do ends the test (t.Fatal)
		do()
	}()
	return <-seen
}

// standby names the primary's synchronous standby ("" for none) and
// waits until commits wait for it (or no longer do): the checkpointer
// turns the setting on for every session some time after the reload.
func standby(t *testing.T, ctx context.Context, admin *sql.DB, name string) {
	t.Helper()
	if _, err := admin.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS standby_probe (x int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+name+"'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	dlocktest.Eventually(t, func() bool {
		probe, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		_, err := admin.ExecContext(probe, "INSERT INTO standby_probe VALUES (1)")
		return (err != nil) == (name != "")
	}, "commits waiting for synchronous_standby_names = '"+name+"'")
}
