package advisory_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

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

// A TTL longer than a session's idle timeout can be is refused by New,
// before any I/O (db here reaches no server): PostgreSQL would refuse the
// idle timeout after taking the lock, and MySQL would cut it down, ending
// the session, and its lock, before the lease.
func TestMaxTTL(t *testing.T) {
	for _, driver := range []string{"pgx", "mysql"} {
		db, err := sql.Open(driver, map[string]string{
			"pgx":   "postgres://nobody@127.0.0.1:1/none",
			"mysql": "nobody@tcp(127.0.0.1:1)/none",
		}[driver])
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := advisory.New(db, dlock.WithTTL(advisory.MaxTTL+time.Second)); err == nil || !strings.Contains(err.Error(), "MaxTTL") {
			t.Errorf("%s: New with a TTL over MaxTTL: %v, want an error naming MaxTTL", driver, err)
		}
		l, err := advisory.New(db, dlock.WithTTL(advisory.MaxTTL))
		if err != nil {
			t.Fatalf("%s: New with MaxTTL: %v", driver, err)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("%s: Close of a Locker that never locked: %v", driver, err)
		}
	}
}
