package advisory_test

import (
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
			lockers := make([]dlock.Locker, 8)
			for i := range lockers {
				lockers[i] = newLocker(b, d.Open(b))
			}
			dlocktest.BenchContended(b, lockers, testenv.SelectOne(db))
		})
	}
}
