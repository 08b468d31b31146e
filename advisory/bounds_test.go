package advisory_test

import (
	"context"
	"database/sql"
	"testing"

	_ "github.com/lib/pq" // registers "postgres", a driver dlock does not know

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Statements run on the caller's goroutine only with the drivers known to
// end their I/O when ctx ends (pgx's stdlib, go-sql-driver/mysql), and
// once the dialect is known; any other driver may outlast its ctx and
// gets a worker.
func TestBoundsCalls(t *testing.T) {
	lockOnce := func(l dlock.Locker) {
		t.Helper()
		lease, err := l.Lock(context.Background(), dlocktest.Name(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range databases {
		l := newLocker(t, migrated(t, d.Open))
		if advisory.BoundsCalls(l) {
			t.Errorf("%s before its first call: BoundsCalls = true, want false (the dialect is not known yet)", d.Name)
		}
		lockOnce(l)
		if !advisory.BoundsCalls(l) {
			t.Errorf("%s (driver %s): BoundsCalls = false, want true", d.Name, d.Driver)
		}
	}
	db, err := sql.Open("postgres", testenv.DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l := newLocker(t, db)
	lockOnce(l)
	if advisory.BoundsCalls(l) {
		t.Error("lib/pq: BoundsCalls = true, want false")
	}
}
