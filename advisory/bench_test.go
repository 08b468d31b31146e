package advisory_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
)

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
			lockers := make([]dlock.Locker, 8)
			for i := range lockers {
				lockers[i] = newLocker(b, d.open(b))
			}
			dlocktest.BenchContended(b, lockers, selectOne(db))
		})
	}
}
