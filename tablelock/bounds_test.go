package tablelock_test

import (
	"database/sql"
	"testing"

	_ "github.com/lib/pq" // registers "postgres", a driver dlock does not know

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
