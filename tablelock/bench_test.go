package tablelock_test

import (
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
