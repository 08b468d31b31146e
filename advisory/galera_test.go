package advisory_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/internal/testenv"
)

// On a Galera node GET_LOCK is the node's own, and a Locker on another
// node would take the same lock at once: session locks are refused, on
// every node, in one line that names tablelock, before anything is taken.
func TestGaleraRefusesSessionLocks(t *testing.T) {
	for i, dsn := range testenv.GaleraDSNs(t) {
		db := testenv.Open(t, "mysql", dsn)
		l := newLocker(t, db)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, lock := range []func(context.Context, string) (dlock.Lease, error){l.TryLock, l.Lock} {
			lease, err := lock(ctx, t.Name())
			if err == nil {
				lease.Unlock(ctx)
				t.Fatalf("node %d: a session lock was granted on a Galera node", i+1)
			}
			if !errors.Is(err, advisory.ErrNodeLocal) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "tablelock") {
				t.Fatalf("node %d: want one line wrapping ErrNodeLocal that names tablelock, got %v", i+1, err)
			}
		}
		var free int
		if err := db.QueryRowContext(ctx, "SELECT IS_FREE_LOCK(?)", advisory.MySQLName(t.Name())).Scan(&free); err != nil || free != 1 {
			t.Fatalf("node %d: IS_FREE_LOCK after the refusals: %d %v", i+1, free, err)
		}
	}
}
