package dlocktest_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/tablelock"
)

// A backend's conformance test: Run checks each property of a Locker on
// Lockers the harness makes on a real server. Broken makes one whose
// connection is closed, for the subtest that every call then fails at
// once.
func ExampleRun() {
	open := func(t *testing.T) *sql.DB {
		db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	newLocker := func(t *testing.T, db *sql.DB, opts ...dlock.Option) dlock.Locker {
		l, err := tablelock.New(db, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(context.Background()) })
		return l
	}
	conformance := func(t *testing.T) {
		dlocktest.Run(t, dlocktest.Harness{
			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { return newLocker(t, open(t), opts...) },
			Broken: func(t *testing.T) dlock.Locker {
				db := open(t)
				db.Close()
				return newLocker(t, db)
			},
		})
	}
	_ = conformance // func TestConformance(t *testing.T) { conformance(t) }
}
