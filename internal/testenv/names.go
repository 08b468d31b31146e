package testenv

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/dlockhq/dlock"
)

// DistinctNames is how many names a test of many distinct names locks:
// DLOCK_DISTINCT_NAMES, or def (the figure of the issue that asked for
// it is 200,000, too slow for every run on some backends).
func DistinctNames(t testing.TB, def int) int {
	t.Helper()
	s := os.Getenv("DLOCK_DISTINCT_NAMES")
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("DLOCK_DISTINCT_NAMES=%q: want a positive count", s)
	}
	return n
}

// LockDistinct locks and unlocks n names, prefix followed by 0 to n-1,
// through l, and fails t at the first Lock or Unlock that fails.
func LockDistinct(t testing.TB, ctx context.Context, l dlock.Locker, prefix string, n int) {
	t.Helper()
	for i := range n {
		lease, err := l.Lock(ctx, prefix+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("Lock of distinct name %d of %d: %v", i+1, n, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock of distinct name %d of %d: %v", i+1, n, err)
		}
	}
}
