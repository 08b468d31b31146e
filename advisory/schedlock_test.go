package advisory_test

import (
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
)

func TestSchedlock(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			schedlocktest.Run(t, schedlocktest.Harness{
				New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
					return newLocker(t, db, opts...)
				},
			})
		})
	}
}
