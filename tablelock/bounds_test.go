package tablelock_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/lib/pq" // registers "postgres", a driver dlock does not know

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/tablelock"
)

// Statements run on the caller's goroutine only with the drivers known to
// end their I/O when ctx ends (pgx's stdlib, go-sql-driver/mysql); any
// other may outlast its ctx and gets a worker.
func TestBoundsCalls(t *testing.T) {
	for _, d := range databases {
		l := newLocker(t, migrated(t, d.Open))
		if !tablelock.BoundsCalls(l) {
			t.Errorf("%s (driver %s): BoundsCalls = false, want true", d.Name, d.Driver)
		}
	}
	db, err := sql.Open("postgres", testenv.DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if tablelock.BoundsCalls(newLocker(t, db)) {
		t.Error("lib/pq: BoundsCalls = true, want false")
	}
}

// An attempt whose reply was lost is made again with the same owner id
// (driver.DeadlineBound): the second takes the hold as it is, with its
// token, and does not count it twice, so one release frees the name.
func TestRetriedAttemptIsIdempotent(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			db := migrated(t, d.Open)
			l := newLocker(t, db)
			name, owner := dlocktest.Name(t), "retried#0123456789abcdef"
			ok1, token1, err := tablelock.Attempt(ctx, l, name, owner)
			if err != nil || !ok1 {
				t.Fatalf("first attempt: acquired %v, %v", ok1, err)
			}
			ok2, token2, err := tablelock.Attempt(ctx, l, name, owner)
			if err != nil || !ok2 || token2 != token1 {
				t.Fatalf("retried attempt: acquired %v, token %d (first %d), %v", ok2, token2, token1, err)
			}
			if err := tablelock.ReleaseHold(ctx, l, name, owner); err != nil {
				t.Fatal(err)
			}
			other, err := newLocker(t, db).TryLock(ctx, name)
			if err != nil {
				t.Fatalf("another owner after one release of a hold attempted twice: %v", err)
			}
			other.Unlock(ctx)
		})
	}
}
