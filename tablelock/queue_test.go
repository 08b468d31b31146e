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

// The PostgreSQL waiters' queue across processes (dlock_waiters). Each
// "process" is a pool of its own, with its own LISTEN connection. The
// waiters rely on push wake-ups alone here: their fallback poll is a
// minute and the holder's lease two, so a waiter the release does not
// notify would still be asleep when its test ends.

// slowPoll leaves a waiter to push wake-ups, as above.
func slowPoll(c *dlock.Config) { c.PushFallback = time.Minute }

// process opens a pool of its own on the migrated test database.
func process(t *testing.T, count *testenv.PGCounter) *sql.DB {
	t.Helper()
	if count == nil {
		count = new(testenv.PGCounter)
	}
	db := migrated(t, count.Open)
	db.SetMaxOpenConns(4)
	return db
}

// queued waits until n processes are in name's queue, and returns their
// pids, longest waiting first.
func queued(t *testing.T, ctx context.Context, db *sql.DB, name string, n int) []int64 {
	t.Helper()
	for {
		pids := queuedNow(t, ctx, db, name)
		if len(pids) == n {
			return pids
		}
		if ctx.Err() != nil {
			t.Fatalf("%d processes queued for %q, want %d", len(pids), name, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// quiesced waits until count's statements stop for 100ms: the waiters'
// attempts since they subscribed are in.
func quiesced(ctx context.Context, count *testenv.PGCounter) int64 {
	requests := count.Requests()
	n0, _ := requests(ctx)
	for {
		time.Sleep(100 * time.Millisecond)
		n, _ := requests(ctx)
		if n == n0 || ctx.Err() != nil {
			return n
		}
		n0 = n
	}
}

// queuedNow is the pids of the processes queued for name, longest
// waiting first.
func queuedNow(t *testing.T, ctx context.Context, db *sql.DB, name string) []int64 {
	t.Helper()
	rows, err := db.QueryContext(ctx, "SELECT pid FROM dlock_waiters WHERE name = $1 AND expires_at > now() ORDER BY since, pid", name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var pids []int64
	for rows.Next() {
		var pid int64
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return pids
}

// waitFor starts l.Lock(ctx, name) and returns where its outcome comes.
func waitFor(ctx context.Context, l dlock.Locker, name string, opts ...dlock.LockOption) <-chan dlock.Lease {
	got := make(chan dlock.Lease, 1)
	go func() {
		lease, err := dlock.LockWith(ctx, l, name, opts...)
		if err != nil {
			close(got)
			return
		}
		got <- lease
	}()
	return got
}

// hold takes name for two minutes in a process of its own.
func hold(t *testing.T, ctx context.Context, name string) dlock.Lease {
	t.Helper()
	lease, err := newLocker(t, process(t, nil), dlock.WithTTL(2*time.Minute)).Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// 16 waiters in 8 processes: a release notifies one process, which wakes
// one waiter, so each hand-off costs the release and one attempt.
func TestQueueWakesOneProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	first := hold(t, ctx, name)
	var count testenv.PGCounter
	const procs, each = 8, 2
	done := make(chan error, procs*each) // each waiter's Lock, then Unlock
	for range procs {
		db := process(t, &count)
		for range each {
			l := newLocker(t, db, slowPoll)
			go func() {
				lease, err := l.Lock(ctx, name)
				if err == nil {
					err = lease.Unlock(ctx)
				}
				done <- err
			}()
		}
	}
	queued(t, ctx, testenv.Postgres(t), name, procs)
	n0 := quiesced(ctx, &count)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range procs * each {
		if err := <-done; err != nil {
			t.Fatalf("a waiter (a release woke nobody?): %v", err)
		}
	}
	n1, _ := count.Requests()(ctx)
	perHandOff := float64(n1-n0) / (procs * each)
	t.Logf("%.2f statements per hand-off, %d waiters in %d processes", perHandOff, procs*each, procs)
	if perHandOff > 3 {
		t.Fatalf("%.2f statements per hand-off: releases wake every process", perHandOff)
	}
}

// The process that waited longest is the one a release wakes.
func TestQueueIsFirstComeFirstServed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	first := hold(t, ctx, name)
	admin := testenv.Postgres(t)
	a := waitFor(ctx, newLocker(t, process(t, nil), slowPoll), name)
	queued(t, ctx, admin, name, 1)
	b := waitFor(ctx, newLocker(t, process(t, nil), slowPoll), name)
	queued(t, ctx, admin, name, 2)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var lease dlock.Lease
	select {
	case lease = <-a:
	case <-b:
		t.Fatal("the process that came second got the lock first")
	}
	if lease == nil {
		t.Fatal("the first waiter failed")
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if lease = <-b; lease == nil {
		t.Fatal("the second waiter failed")
	}
	_ = lease.Unlock(ctx)
}

// A process whose waiter gave up is still at the head of the queue when
// the lock is released: it passes the wake-up on.
func TestQueuePassesOnForALeftProcess(t *testing.T) {
	wakesTheNextAfter(t, nil, "the wake-up went to the process that left")
}

// A process that died while queued (its LISTEN connection is gone) is
// skipped: the release wakes the next live one.
func TestQueueSkipsADeadProcess(t *testing.T) {
	wakesTheNextAfter(t, func(ctx context.Context, admin, db *sql.DB, l *tablelock.Locker, pid int64) {
		if err := l.Close(ctx); err != nil && !errors.Is(err, dlock.ErrClosed) {
			t.Fatal(err)
		}
		_ = db.Close()
		for { // until its LISTEN connection is gone
			var alive bool
			if err := admin.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive); err != nil {
				t.Fatal(err)
			}
			if !alive {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}, "the wake-up went to the dead process")
}

// wakesTheNextAfter queues a process, cancels its waiter's Lock and, with
// die, ends the process (given its pool, Locker and queued pid); then it
// queues a second process behind the first and checks that a release
// wakes the second. why says what went wrong if it does not.
func wakesTheNextAfter(t *testing.T, die func(ctx context.Context, admin, db *sql.DB, l *tablelock.Locker, pid int64), why string) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	first := hold(t, ctx, name)
	admin := testenv.Postgres(t)
	goneDB := process(t, nil)
	gone := newLocker(t, goneDB, slowPoll)
	leftCtx, leave := context.WithCancel(ctx)
	left := waitFor(leftCtx, gone, name)
	pid := queued(t, ctx, admin, name, 1)[0]
	leave()
	if lease := <-left; lease != nil {
		t.Fatal("a cancelled Lock got the lock")
	}
	if die != nil {
		die(ctx, admin, goneDB, gone, pid)
	}
	next := waitFor(ctx, newLocker(t, process(t, nil), slowPoll), name)
	if pids := queued(t, ctx, admin, name, 2); pids[0] != pid {
		t.Fatalf("queue %v: the first process %d is not at its head", pids, pid)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-next
	if lease == nil {
		t.Fatal("the next process was not woken: " + why)
	}
	_ = lease.Unlock(ctx)
}

// Prune deletes the queue rows that expired, and only those.
func TestPruneQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	db := migrated(t, testenv.Postgres)
	name := dlocktest.Name(t)
	if _, err := db.ExecContext(ctx, `INSERT INTO dlock_waiters (name, pid, since, expires_at)
		VALUES ($1, 1, now(), now() - interval '1 second'), ($1, 2, now(), now() + interval '1 hour')`, name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DELETE FROM dlock_waiters WHERE name = $1", name) })
	if _, err := tablelock.Prune(ctx, db, time.Hour); err != nil {
		t.Fatal(err)
	}
	var pids []int64
	rows, err := db.QueryContext(ctx, "SELECT pid FROM dlock_waiters WHERE name = $1 ORDER BY pid", name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var pid int64
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 1 || pids[0] != 2 {
		t.Fatalf("queue rows after Prune: pids %v, want [2] (the live one)", pids)
	}
}

// handedOn unlocks first and returns the lease the waiter gets from next;
// on says under what schema, for the failures.
func handedOn(t *testing.T, ctx context.Context, first dlock.Lease, next <-chan dlock.Lease, on string) dlock.Lease {
	t.Helper()
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("Unlock %s: %v", on, err)
	}
	lease := <-next
	if lease == nil {
		t.Fatal("the waiter did not get the lock " + on)
	}
	return lease
}
