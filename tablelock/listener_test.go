package tablelock_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// The life of a process's LISTEN connection on PostgreSQL: up while the
// process waits and its place in the queue may last, back in the pool
// after, and back up when the connection dies under a waiter.

// backendQuery is the state and last statement of the server process pid,
// and whether it is alive.
func backendQuery(t *testing.T, ctx context.Context, admin *sql.DB, pid int64) (state, query string, alive bool) {
	t.Helper()
	err := admin.QueryRowContext(ctx, "SELECT state, query FROM pg_stat_activity WHERE pid = $1", pid).Scan(&state, &query)
	if err == sql.ErrNoRows {
		return "", "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return state, query, true
}

// An idle process stops listening once its place in the queue has lapsed
// (so it is no longer signalled by every NOTIFY in the database) and
// gives the connection back to its pool, alive; its next wait listens
// again and is granted the lock.
func TestIdleListenerGoesBackToThePool(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*dlocktest.Timeout) // past Eventually's
	defer cancel()
	name := dlocktest.Name(t)
	admin := testenv.Postgres(t)
	db := process(t, nil)
	// A place in the queue of 2*100ms + 1s: the listener stops 1s after.
	l := newLocker(t, db, func(c *dlock.Config) { c.PushFallback = 100 * time.Millisecond }, dlock.WithTTL(time.Minute))

	first := hold(t, ctx, name)
	next := waitFor(ctx, l, name)
	pid := queued(t, ctx, admin, name, 1)[0]
	lease := handedOn(t, ctx, first, next, "in the first wait")
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if state, query, alive := backendQuery(t, ctx, admin, pid); !alive || query == "UNLISTEN *" {
		t.Fatalf("the LISTEN connection right after the wait: %q %q alive %v, want it listening", state, query, alive)
	}
	dlocktest.Eventually(t, func() bool {
		state, query, alive := backendQuery(t, ctx, admin, pid)
		if !alive {
			t.Fatal("the LISTEN connection was closed, not given back to the pool")
		}
		return state == "idle" && query == "UNLISTEN *" && db.Stats().InUse == 0
	}, "the idle listener stopped listening and its connection went back to the pool")

	first = hold(t, ctx, name)
	next = waitFor(ctx, l, name)
	queued(t, ctx, admin, name, 1)
	lease = handedOn(t, ctx, first, next, "in a wait after the listener stopped")
	_ = lease.Unlock(ctx)
}

// A waiter whose process's LISTEN connection dies keeps its subscription:
// the listener connects again, the waiter queues under the new
// connection, and the next release grants it the lock, long before its
// fallback poll (a minute) would have found it.
func TestListenerReconnectsForItsWaiters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*dlocktest.Timeout) // past Eventually's
	defer cancel()
	name := dlocktest.Name(t)
	admin := testenv.Postgres(t)
	first := hold(t, ctx, name)
	next := waitFor(ctx, newLocker(t, process(t, nil), slowPoll, dlock.WithTTL(time.Minute)), name)
	pid := queued(t, ctx, admin, name, 1)[0]
	var killed bool
	if err := admin.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", pid).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminating the LISTEN connection %d: %v %v", pid, killed, err)
	}
	dlocktest.Eventually(t, func() bool {
		for _, p := range queuedNow(t, ctx, admin, name) {
			if p != pid {
				return true
			}
		}
		return false
	}, "the waiter queued again under a new LISTEN connection")
	lease := handedOn(t, ctx, first, next, "after its LISTEN connection died")
	_ = lease.Unlock(ctx)
}
