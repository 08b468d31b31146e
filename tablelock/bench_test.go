package tablelock_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func BenchmarkUncontended(b *testing.B) {
	for _, d := range databases {
		b.Run(d.Name, func(b *testing.B) {
			db := migrated(b, d.Open)
			dlocktest.BenchUncontended(b, newLocker(b, db), testenv.SelectOne(db))
		})
	}
}

func BenchmarkContended(b *testing.B) {
	for _, d := range databases {
		b.Run(d.Name, func(b *testing.B) {
			db := migrated(b, d.Open)
			// Each contender has its own pool, as a separate process would.
			dlocktest.BenchContended(b, func(b *testing.B) dlock.Locker { return newLocker(b, d.Open(b)) }, testenv.SelectOne(db))
		})
	}
}

// BenchmarkHerd counts MySQL's Questions (statements from clients) per
// hand-off with 64 waiters. PostgreSQL has no such live counter: its
// statistics reach pg_stat_database up to seconds late.
func BenchmarkHerd(b *testing.B) {
	b.Run("mysql", func(b *testing.B) {
		db := migrated(b, testenv.MySQL)
		waiters := make([]dlock.Locker, 64)
		for i := range waiters {
			waiters[i] = newLocker(b, db)
		}
		dlocktest.BenchHerd(b, newLocker(b, db), waiters, func(ctx context.Context) (int64, error) {
			var name string
			var n int64
			err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n)
			return n, err
		})
	})
}

// BenchmarkUncontendedRaw is W1 on the bare primitive the package wraps,
// beside BenchmarkUncontended: the target dlock's figures are measured
// against.
func BenchmarkUncontendedRaw(b *testing.B) {
	for _, d := range databases {
		b.Run(d.Name, func(b *testing.B) {
			db := migrated(b, d.Open)
			dlocktest.BenchUncontended(b, raw(b, db, d.Driver), testenv.SelectOne(db))
		})
	}
}

// BenchmarkContendedRaw is W2 on the bare primitive, beside
// BenchmarkContended.
func BenchmarkContendedRaw(b *testing.B) {
	for _, d := range databases {
		b.Run(d.Name, func(b *testing.B) {
			db := migrated(b, d.Open)
			dlocktest.BenchContended(b, func(b *testing.B) dlock.Locker { return raw(b, d.Open(b), d.Driver) }, testenv.SelectOne(db))
		})
	}
}

// raw is the bare SELECT … FOR UPDATE transaction on db.
func raw(b *testing.B, db *sql.DB, driver string) dlock.Locker {
	l, err := testenv.RawForUpdate(context.Background(), db, driver)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkSeckill is W3 through one Locker shared by the buyers; stock
// and orders are in the same server, on a pool of their own.
func BenchmarkSeckill(b *testing.B) {
	testenv.Seckill(b, func(b *testing.B, db *sql.DB, _ string) dlock.Locker { return newLocker(b, db) })
}

// BenchmarkSeckillRaw is W3 on a bare SELECT … FOR UPDATE transaction,
// beside BenchmarkSeckill.
func BenchmarkSeckillRaw(b *testing.B) {
	testenv.Seckill(b, func(b *testing.B, db *sql.DB, driver string) dlock.Locker { return raw(b, db, driver) })
}
