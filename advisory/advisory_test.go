package advisory_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/migrations"
)

var databases = []struct {
	name string
	open func(testing.TB) *sql.DB
}{
	{"postgres", testenv.Postgres},
	{"mysql", testenv.MySQL},
}

func migrated(t testing.TB, open func(testing.TB) *sql.DB) *sql.DB {
	t.Helper()
	db := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}

func newLocker(t testing.TB, db *sql.DB, opts ...dlock.Option) *advisory.Locker {
	t.Helper()
	l, err := advisory.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

func TestConformance(t *testing.T) {
	for _, d := range databases {
		t.Run(d.name, func(t *testing.T) {
			db := migrated(t, d.open)
			dlocktest.Run(t, dlocktest.Harness{
				New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
					return newLocker(t, db, opts...)
				},
			})
		})
	}
}
