package tablelock_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/tablelock"
)

// On PostgreSQL (migration 000005) a release grants the lock to the
// waiter at the head of the queue: the waiter holds it without a
// statement of its own, with a new token, and its lease ends before the
// server's expiry.

// serverExpiry is name's expiry in dlock_locks, by the server's clock.
func serverExpiry(t *testing.T, ctx context.Context, db *sql.DB, name string) time.Time {
	t.Helper()
	var at time.Time
	if err := db.QueryRowContext(ctx, "SELECT expires_at FROM dlock_locks WHERE name = $1", name).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

func TestReleaseGrantsToTheQueuedWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	admin := testenv.Postgres(t)
	first := hold(t, ctx, name)
	var count testenv.PGCounter
	waiter := newLocker(t, process(t, &count), slowPoll, dlock.WithTTL(time.Minute))
	if _, _, err := waiter.Inspect(ctx, name); err != nil { // the Locker's one schema check
		t.Fatal(err)
	}
	before, _ := count.Requests()(ctx)
	const why = "waiter's payload: deploy #7"
	next := waitFor(ctx, waiter, name, dlock.WithPayload(why))
	queued(t, ctx, admin, name, 1)
	n0 := quiesced(ctx, &count)
	lease := handedOn(t, ctx, first, next, "queued for a grant")
	defer func() { _ = lease.Unlock(ctx) }()
	n, _ := count.Requests()(ctx)
	if n != n0 {
		t.Errorf("the waiter's process sent %d statements to take a granted lock, want 0", n-n0)
	}
	// Its try, LISTEN, and the attempt that queued it: nothing wakes it
	// before the release, not even the LISTEN it subscribed on.
	if n-before != 3 {
		t.Errorf("the waiter's process sent %d statements from Lock to the hold, want 3", n-before)
	}
	if lease.Token() <= first.Token() {
		t.Errorf("granted token %d, not above the last holder's %d", lease.Token(), first.Token())
	}
	h, ok, err := newLocker(t, admin).Inspect(ctx, name)
	if err != nil || !ok || h.Owner != lease.Owner() || h.Token != lease.Token() || h.Payload != why {
		t.Fatalf("Inspect: %+v %v %v, want the waiter's hold (%q, token %d, payload %q)", h, ok, err, lease.Owner(), lease.Token(), why)
	}
	if exp := serverExpiry(t, ctx, admin, name); !lease.Deadline().Before(exp) {
		t.Fatalf("the waiter's lease ends at %v, not before the server's expiry %v", lease.Deadline(), exp)
	}
	if queued := queuedNow(t, ctx, admin, name); len(queued) != 0 {
		t.Fatalf("the granted process is still queued: %v", queued)
	}
}

// A waiter in a process whose LISTEN connection is already up queues
// with its first attempt, and a release grants it the lock: one
// statement from the wait to the hold. (Without a live connection the
// first attempt misses unqueued, the waiter subscribes, and a second
// attempt queues it.)
func TestWaiterQueuesWithItsFirstAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	admin := testenv.Postgres(t)
	var count testenv.PGCounter
	l := newLocker(t, process(t, &count), slowPoll, dlock.WithTTL(time.Minute))

	// A first wait brings the process's LISTEN connection up; it stays up
	// after, while the process's place in the queue may last (slowPoll:
	// two minutes).
	earlier := hold(t, ctx, name+"/earlier")
	got := waitFor(ctx, l, name+"/earlier")
	queued(t, ctx, admin, name+"/earlier", 1)
	if err := handedOn(t, ctx, earlier, got, "in the first wait").Unlock(ctx); err != nil {
		t.Fatal(err)
	}

	first := hold(t, ctx, name)
	n0 := quiesced(ctx, &count)
	next := waitFor(ctx, l, name)
	queued(t, ctx, admin, name, 1)
	n1 := quiesced(ctx, &count)
	lease := handedOn(t, ctx, first, next, "queued by its first attempt")
	defer func() { _ = lease.Unlock(ctx) }()
	if n, _ := count.Requests()(ctx); n1-n0 != 1 || n != n1 {
		t.Errorf("the waiter sent %d statements to queue and %d to take its grant, want 1 and 0", n1-n0, n-n1)
	}
	if lease.Token() <= first.Token() {
		t.Errorf("granted token %d, not above the last holder's %d", lease.Token(), first.Token())
	}
}

// A waiter that gives up leaves its process's place without an owner
// before its Lock returns, or just after when the server is slow to
// answer (the leave has dlock.CancelMargin, and then goes on in the
// background), so the next release grants it to nobody who left, and
// the name is free for anyone at once. Without the leave the place
// would name the waiter for minutes (slowPoll).
func TestGivingUpLeavesNoGrantBehind(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	admin := testenv.Postgres(t)
	first := hold(t, ctx, name)
	leftCtx, leave := context.WithCancel(ctx)
	left := waitFor(leftCtx, newLocker(t, process(t, nil), slowPoll), name)
	queued(t, ctx, admin, name, 1)
	leave()
	if lease := <-left; lease != nil {
		t.Fatal("a cancelled Lock got the lock")
	}
	returned := time.Now()
	owners := func() int {
		var n int
		// Not ctx: Eventually's deadline is ctx's, and should say what failed.
		if err := admin.QueryRowContext(context.Background(), "SELECT count(owner) FROM dlock_waiters WHERE name = $1", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if owners() != 0 {
		dlocktest.Eventually(t, func() bool { return owners() == 0 }, "the queue no longer names the waiter that gave up")
		t.Logf("the queue named the waiter that gave up for %v after its Lock returned (a slow server)", time.Since(returned))
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := newLocker(t, admin).TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock after the only waiter gave up: %v", err)
	}
	_ = lease.Unlock(ctx)
}

// A grant for an owner that no longer waits in the process it names
// (its waiter left between the release's look at the queue and its
// commit) is given back by that process, and the lock passes on.
func TestGrantToAGoneWaiterIsGivenBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name, other := dlocktest.Name(t), dlocktest.Name(t)
	admin := testenv.Postgres(t)
	// A process whose listener is up, waiting for another name.
	blocker := hold(t, ctx, other)
	defer func() { _ = blocker.Unlock(ctx) }()
	proc := process(t, nil)
	elsewhere, stop := context.WithCancel(ctx)
	defer stop()
	waitFor(elsewhere, newLocker(t, proc, slowPoll), other)
	pid := queued(t, ctx, admin, other, 1)[0]

	first := hold(t, ctx, name)
	queueByHand(t, ctx, admin, name, pid, "gone#0123456789abcdef", time.Minute)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if token := lockedOnce(t, ctx, newLocker(t, admin), name, "the grant to the gone waiter was given back"); token <= first.Token()+1 {
		t.Errorf("token %d after a grant with token %d", token, first.Token()+1)
	}
}

// queueByHand queues owner of process pid for name, with a TTL of a
// minute and one attempt, for place (what is left of the process's place
// in the queue), as a failed attempt would; the row goes when t ends.
func queueByHand(t *testing.T, ctx context.Context, admin *sql.DB, name string, pid int64, owner string, place time.Duration) {
	t.Helper()
	if _, err := admin.ExecContext(ctx, `INSERT INTO dlock_waiters (name, pid, since, expires_at, own_channel, owner, ttl_us, attempt)
		VALUES ($1, $2, now(), now() + $4 * interval '1 microsecond', true, $3, 60000000, 1)`, name, pid, owner, place.Microseconds()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "DELETE FROM dlock_waiters WHERE name = $1", name)
	})
}

// lockedOnce tries l.TryLock until it takes name, which it then unlocks,
// and returns the token it got; what says what the test waits for.
func lockedOnce(t *testing.T, ctx context.Context, l dlock.Locker, name, what string) uint64 {
	t.Helper()
	var token uint64
	dlocktest.Eventually(t, func() bool {
		lease, err := l.TryLock(ctx, name)
		if err != nil {
			if !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatal(err)
			}
			return false
		}
		token = lease.Token()
		_ = lease.Unlock(ctx)
		return true
	}, what)
	return token
}

// A waiter whose grant's notification was lost (its listener's
// connection dropped) takes the lock at its next attempt, as its own
// hold: the grant's token, and an expiry pushed past the lease the
// attempt starts.
func TestLostGrantIsTakenByTheNextAttempt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	admin := testenv.Postgres(t)
	// A holder that is no Locker: the test grants its lock by hand,
	// as a release would, but without the notification.
	if _, err := admin.ExecContext(ctx, `INSERT INTO dlock_locks (name, owner, reentry, token, acquired_at, expires_at)
		VALUES ($1, 'holder#0', 1, 1, now(), now() + interval '1 minute')`, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "DELETE FROM dlock_locks WHERE name = $1", name)
	})
	next := waitFor(ctx, newLocker(t, process(t, nil), func(c *dlock.Config) { c.PushFallback = 300 * time.Millisecond }, dlock.WithTTL(time.Minute)), name)
	queued(t, ctx, admin, name, 1)
	var owner string
	if err := admin.QueryRowContext(ctx, "SELECT owner FROM dlock_waiters WHERE name = $1", name).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, `UPDATE dlock_locks SET owner = $2, reentry = 0, token = 7,
		acquired_at = now(), expires_at = now() + interval '2 seconds' WHERE name = $1`, name, owner); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ExecContext(ctx, "DELETE FROM dlock_waiters WHERE name = $1", name); err != nil {
		t.Fatal(err)
	}
	lease := <-next
	if lease == nil {
		t.Fatal("the waiter did not take the lock granted to it")
	}
	if lease.Owner() != owner || lease.Token() != 7 {
		t.Fatalf("lease of %q with token %d, want %q's grant, token 7", lease.Owner(), lease.Token(), owner)
	}
	if exp := serverExpiry(t, ctx, admin, name); !lease.Deadline().Before(exp) {
		t.Fatalf("the lease ends at %v, not before the server's expiry %v", lease.Deadline(), exp)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := newLocker(t, admin).TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock after the grant's one hold ended: %v", err)
	}
	_ = lease.Unlock(ctx)
}

// A grant to a process that stopped attempting (frozen, or cut off with
// its connection still up) lasts no longer than what was left of its
// place in the queue, not its waiter's whole TTL: then the lock is free.
func TestGrantToAFrozenProcessEndsWithItsPlace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	admin := testenv.Postgres(t)
	pid, _ := listening(t, admin, "frozen_process", name) // a live session that never answers
	first := hold(t, ctx, name)
	queueByHand(t, ctx, admin, name, int64(pid), "frozen#0123456789abcdef", time.Second)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var (
		owner   string
		bounded bool
	)
	if err := admin.QueryRowContext(ctx, `SELECT owner, expires_at <= now() + interval '1 second'
		FROM dlock_locks WHERE name = $1`, name).Scan(&owner, &bounded); err != nil {
		t.Fatal(err)
	}
	if owner != "frozen#0123456789abcdef" {
		t.Fatalf("owner %q after the release, want the queued waiter", owner)
	}
	if !bounded {
		t.Fatal("the grant outlasts the frozen process's place in the queue")
	}
	lockedOnce(t, ctx, newLocker(t, admin), name, "the grant to the frozen process ended")
}

// A grant's notification splits the owner from the name by the owner's
// length in characters: both may hold '/' and any UTF-8.
func TestParseGrant(t *testing.T) {
	g, ok := tablelock.ParseGrant("g/42/7/1001/30000000/11/hôst/9#a1b2orders/ü/1")
	want := tablelock.Grant{PID: 42, Attempt: 7, Token: 1001, Term: 30 * time.Second, Owner: "hôst/9#a1b2", Name: "orders/ü/1"}
	if !ok || g != want {
		t.Fatalf("ParseGrant: %+v %v, want %+v", g, ok, want)
	}
	for _, bad := range []string{
		"42/orders",                   // a wake-up
		"g/42/7/1001/30000000/99/ab",  // owner longer than the rest
		"g/42/7/x/30000000/2/abname",  // a field not a number
		"g/4294967296/7/1/1/2/abname", // no such pid
		"g/42/7/1001",                 // cut short
	} {
		if g, ok := tablelock.ParseGrant(bad); ok {
			t.Errorf("ParseGrant(%q) = %+v, want no grant", bad, g)
		}
	}
}

// The release of a hold whose acquire saw nobody queued is one short
// statement while nobody is queued still: it leaves the name's queue
// alone, where the queue's statement deletes the rows that expired. A
// hold that a waiter queued behind after its acquire is granted to that
// waiter all the same, and that release tidies the queue.
func TestQuietReleaseLeavesTheQueueAlone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	admin := testenv.Postgres(t)
	if _, err := admin.ExecContext(ctx, `INSERT INTO dlock_waiters (name, pid, since, expires_at)
		VALUES ($1, 1, now(), now() - interval '1 second')`, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "DELETE FROM dlock_waiters WHERE name = $1", name)
	})
	expired := func() bool {
		t.Helper()
		var n int
		if err := admin.QueryRowContext(ctx, "SELECT count(*) FROM dlock_waiters WHERE name = $1 AND pid = 1", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}

	lease := hold(t, ctx, name)
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if !expired() {
		t.Fatal("the release of an uncontended hold went through the queue: the expired queue row is gone")
	}

	first := hold(t, ctx, name)
	var count testenv.PGCounter
	next := waitFor(ctx, newLocker(t, process(t, &count), slowPoll, dlock.WithTTL(time.Minute)), name)
	queued(t, ctx, admin, name, 1)
	n0 := quiesced(ctx, &count)
	lease = handedOn(t, ctx, first, next, "queued after the holder's acquire")
	defer func() { _ = lease.Unlock(ctx) }()
	if n, _ := count.Requests()(ctx); n != n0 {
		t.Errorf("the waiter's process sent %d statements to take the lock, want 0: the release did not grant it", n-n0)
	}
	if expired() {
		t.Error("the release with a waiter queued left the expired queue row")
	}
}
