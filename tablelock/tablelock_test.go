package tablelock_test

import (
	"database/sql"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/tablelock"
)

var databases = testenv.SQLDatabases

func migrated(t testing.TB, open func(testing.TB) *sql.DB) *sql.DB { return testenv.Migrated(t, open) }

func newLocker(t testing.TB, db *sql.DB, opts ...dlock.Option) *tablelock.Locker {
	t.Helper()
	l, err := tablelock.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}

func TestConformance(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			h := testenv.SQLHarness(d.Driver, d.Open, db, newLocker)
			h.Stall = testenv.RowStall(db, d.Driver)
			dlocktest.Run(t, h)
		})
	}
}
