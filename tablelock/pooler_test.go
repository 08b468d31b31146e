package tablelock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/election/electiontest"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
)

// TestThroughPgBouncer runs the conformance suite through PgBouncer's
// transaction and statement pooling, under the pgx query modes a pooler
// needs: every statement of the lock table stands alone, so no pool
// mode splits one. The Locker finds the pooler itself and polls.
func TestThroughPgBouncer(t *testing.T) {
	for _, pooling := range []string{"transaction", "statement"} {
		for _, mode := range []string{"exec", "simple_protocol"} {
			t.Run(pooling+"/"+mode, func(t *testing.T) {
				open := func(t testing.TB) *sql.DB { return testenv.Open(t, "pgx", testenv.PgBouncerDSN(t, pooling, mode)) }
				h := testenv.SQLHarness("pgx", open, migrated(t, open), newLocker)
				h.Dial = nil
				// LISTEN is not delivered through a pooler: waiters poll,
				// and a polling waiter keeps no place in the queue.
				h.WaitersUncounted = true
				dlocktest.Run(t, h)
				if pooling == "transaction" && mode == "simple_protocol" { // what PgBouncer users run
					t.Run("Election", func(t *testing.T) {
						electiontest.Run(t, electiontest.Harness{New: h.New, Broken: h.Broken})
					})
					t.Run("Jobs", func(t *testing.T) { schedlocktest.Run(t, schedlocktest.Harness{New: h.New}) })
				}
			})
		}
	}
}

// pgx's default mode prepares named statements, which a pooler hands to
// other server sessions: through any PgBouncer the first use refuses,
// in one line that says what to set, and takes nothing.
func TestPoolerRefusesNamedStatements(t *testing.T) {
	for pooling := range testenv.PgBouncerPorts {
		t.Run(pooling, func(t *testing.T) {
			db := migrated(t, func(t testing.TB) *sql.DB { return testenv.Open(t, "pgx", testenv.PgBouncerDSN(t, pooling, "")) })
			l := newLocker(t, db)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for range 2 {
				lease, err := l.TryLock(ctx, dlocktest.Name(t))
				if err == nil {
					lease.Unlock(ctx)
					t.Fatal("granted through a pooler with named statements")
				}
				if !errors.Is(err, sqldialect.ErrPooledStatements) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "default_query_exec_mode=exec") {
					t.Fatalf("want one line that names default_query_exec_mode=exec, got %v", err)
				}
			}
		})
	}
}
