package advisory_test

import (
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/election/electiontest"
)

func TestElection(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			electiontest.Run(t, electiontest.Harness{
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
