package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
)

// PgxPool is a pgx pool on the migrated test PostgreSQL database;
// t.Cleanup closes it.
func PgxPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	Migrated(t, Postgres)
	pool, err := pgxpool.New(context.Background(), DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// OnPgxPool runs the conformance suite on Lockers that newLocker makes
// on pgx pools (NewPool), then checks that closing one leaves its pool
// to its owner, and that a nil pool is refused.
func OnPgxPool[L interface {
	dlock.Locker
	Close(context.Context) error
}](t *testing.T, newLocker func(*pgxpool.Pool, ...dlock.Option) (L, error)) {
	mk := func(t *testing.T, pool *pgxpool.Pool, opts ...dlock.Option) L {
		l, err := newLocker(pool, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return Closing(t, l)
	}
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { return mk(t, PgxPool(t), opts...) },
		Broken: func(t *testing.T) dlock.Locker {
			pool := PgxPool(t)
			l := mk(t, pool, dlock.WithTTL(dlocktest.Timeout))
			pool.Close()
			return l
		},
	})
	pool := PgxPool(t)
	l, err := newLocker(pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("the pool after the Locker's Close: %v", err)
	}
	if _, err := newLocker(nil); err == nil {
		t.Fatal("a Locker on a nil pool")
	}
}
