package advisory_test

import (
	"database/sql"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

var databases = testenv.SQLDatabases

func migrated(t testing.TB, open func(testing.TB) *sql.DB) *sql.DB { return testenv.Migrated(t, open) }

func newLocker(t testing.TB, db *sql.DB, opts ...dlock.Option) *advisory.Locker {
	t.Helper()
	l, err := advisory.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}

func TestConformance(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			dlocktest.Run(t, dlocktest.Harness{
				New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
					return newLocker(t, db, opts...)
				},
				Broken: func(t *testing.T) dlock.Locker {
					closed := d.Open(t)
					l := newLocker(t, closed)
					closed.Close()
					return l
				},
			})
		})
	}
}
