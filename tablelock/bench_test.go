package tablelock_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
)

// contenders is K in workload W2: clients with their own connection pools,
// as K application processes would have.
const contenders = 8

func selectOne(db *sql.DB) dlocktest.RoundTrip {
	return func(ctx context.Context) error {
		var one int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	}
}

func BenchmarkUncontended(b *testing.B) {
	for _, d := range databases {
		b.Run(d.name, func(b *testing.B) {
			db := migrated(b, d.open)
			dlocktest.BenchUncontended(b, newLocker(b, db), selectOne(db))
		})
	}
}

func BenchmarkContended(b *testing.B) {
	for _, d := range databases {
		b.Run(d.name, func(b *testing.B) {
			db := migrated(b, d.open)
			lockers := make([]dlock.Locker, contenders)
			for i := range lockers {
				// Each contender has its own pool, as a separate process would.
				own := d.open(b)
				lockers[i] = newLocker(b, own)
			}
			dlocktest.BenchContended(b, lockers, selectOne(db))
		})
	}
}
