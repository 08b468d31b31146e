package tablelock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// The life of a process's LISTEN connection on PostgreSQL.

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
