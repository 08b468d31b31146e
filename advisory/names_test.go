package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// A lock library must not stop because it was used for many names (order
// ids, user ids): every Lock of a new name succeeds, and once unlocked a
// name leaves no row behind, without Prune.
func TestManyDistinctNames(t *testing.T) {
	for _, d := range databases {
		if d.Driver != "mysql" {
			continue // PostgreSQL's advisory locks write nothing
		}
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			l := newLocker(t, db)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			prefix := dlocktest.Name(t) + "."
			t.Cleanup(func() { // whatever a failed run left, for the tests after it
				_, _ = db.ExecContext(context.Background(), "DELETE FROM dlock_fences WHERE name LIKE ?", prefix+"%")
			})
			// 40,000: past the ~31,000 rows a MEMORY dlock_fences holds at the
			// default max_heap_table_size.
			n := testenv.DistinctNames(t, 40_000)
			testenv.LockDistinct(t, ctx, l, prefix, n)
			var left int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM dlock_fences WHERE name LIKE ?", prefix+"%").Scan(&left); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d distinct names locked and unlocked; %d rows left", n, left)
			if left != 0 {
				t.Errorf("%d of %d unlocked names left a dlock_fences row", left, n)
			}
		})
	}
}
