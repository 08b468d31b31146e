package tablelock_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/tablelock"
)

// Used for many names (order ids, user ids), every Lock succeeds, and the
// table keeps only the names locked within the prune idle time: once the
// rows are older, the Lockers delete them themselves, with no Prune run
// by the user.
func TestManyDistinctNames(t *testing.T) {
	for _, driver := range []string{"pgx", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			db := testenv.Fresh(t, driver)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
			defer cancel()
			if err := migrations.Up(ctx, db); err != nil {
				t.Fatal(err)
			}
			l := newLocker(t, db, tablelock.WithPruneIdle(tablelock.MinPruneIdle))
			prefix := dlocktest.Name(t) + "."
			n := testenv.DistinctNames(t, 5_000)
			testenv.LockDistinct(t, ctx, l, prefix, n)
			count := func() int {
				var rows int
				if err := db.QueryRowContext(ctx, "SELECT count(*) FROM dlock_locks").Scan(&rows); err != nil {
					t.Fatal(err)
				}
				return rows
			}
			if rows := count(); rows != n {
				t.Fatalf("%d rows after %d names locked just now, want %d: none is idle yet", rows, n, n)
			}
			// The names go idle: their last grant moves past MinPruneIdle.
			age := "UPDATE dlock_locks SET acquired_at = acquired_at - INTERVAL 2 MINUTE"
			if _, ok := db.Driver().(*stdlib.Driver); ok {
				age = "UPDATE dlock_locks SET acquired_at = acquired_at - interval '2 minutes'"
			}
			if _, err := db.ExecContext(ctx, age); err != nil {
				t.Fatal(err)
			}
			tablelock.SetPruneInterval(l, 0)
			lease, err := l.Lock(ctx, prefix+"last")
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Unlock(ctx); err != nil { // starts the background prune
				t.Fatal(err)
			}
			dlocktest.Eventually(t, func() bool { return count() == 1 }, fmt.Sprintf("the %d idle rows deleted in the background", n))
		})
	}
}

// stdlibOpenNowhere opens a *sql.DB that would reach no server: the
// calls under test must make no I/O.
func stdlibOpenNowhere() (*sql.DB, error) {
	return sql.Open("pgx", "postgres://u@127.0.0.1:1/none?connect_timeout=1")
}

// A negative prune idle time is refused before any I/O, in one line.
func TestWithPruneIdleBadInput(t *testing.T) {
	db, err := stdlibOpenNowhere()
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := tablelock.New(db, tablelock.WithPruneIdle(-time.Second)); err == nil {
		t.Fatal("WithPruneIdle(-1s) accepted")
	}
	l, err := tablelock.New(db, tablelock.WithPruneIdle(0)) // off
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close(context.Background())
}
