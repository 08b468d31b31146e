package advisory_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/dlockhq/dlock/dlocktest"
)

// distinctNames is how many names TestManyDistinctNames locks:
// DLOCK_DISTINCT_NAMES, or 40,000 (past the ~31,000 rows a MEMORY
// dlock_fences holds at the default max_heap_table_size; the issue's
// figure is 200,000).
func distinctNames(t *testing.T) int {
	if s := os.Getenv("DLOCK_DISTINCT_NAMES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("DLOCK_DISTINCT_NAMES=%q: want a positive count", s)
		}
		return n
	}
	return 40_000
}

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
			n := distinctNames(t)
			for i := range n {
				lease, err := l.Lock(ctx, prefix+strconv.Itoa(i))
				if err != nil {
					t.Fatalf("Lock of distinct name %d of %d: %v", i+1, n, err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatalf("Unlock of distinct name %d of %d: %v", i+1, n, err)
				}
			}
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
