package advisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// newPool is a pgx pool on the migrated test database; t.Cleanup closes it.
func newPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	testenv.Migrated(t, testenv.Postgres)
	pool, err := pgxpool.New(context.Background(), testenv.DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// A Locker on a pgx pool, without database/sql, passes the conformance
// suite; closing it leaves the pool to its owner.
func TestNewPoolConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			l, err := advisory.NewPool(newPool(t), opts...)
			if err != nil {
				t.Fatal(err)
			}
			return testenv.Closing(t, l)
		},
		Broken: func(t *testing.T) dlock.Locker {
			pool := newPool(t)
			l, err := advisory.NewPool(pool, dlock.WithTTL(dlocktest.Timeout))
			if err != nil {
				t.Fatal(err)
			}
			pool.Close()
			return testenv.Closing(t, l)
		},
	})
	pool := newPool(t)
	l, err := advisory.NewPool(pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("the pool after the Locker's Close: %v", err)
	}
	if _, err := advisory.NewPool(nil); err == nil {
		t.Fatal("NewPool(nil) succeeded")
	}
}
