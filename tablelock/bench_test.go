package tablelock_test

import (
	"context"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// contenders is K in workload W2: clients with their own connection pools,
// as K application processes would have.
const contenders = 8

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
			lockers := make([]dlock.Locker, contenders)
			for i := range lockers {
				// Each contender has its own pool, as a separate process would.
				own := d.Open(b)
				lockers[i] = newLocker(b, own)
			}
			dlocktest.BenchContended(b, lockers, testenv.SelectOne(db))
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
