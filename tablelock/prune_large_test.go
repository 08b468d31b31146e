package tablelock_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/tablelock"
)

// pruneRows is how many idle rows TestPruneLargeTableKeepsLeases fills
// the table with: DLOCK_PRUNE_ROWS, or 100,000 (1,000,000 is the
// issue's figure; it takes a minute or two per database).
func pruneRows(t *testing.T) int {
	if s := os.Getenv("DLOCK_PRUNE_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("DLOCK_PRUNE_ROWS=%q: want a positive count", s)
		}
		return n
	}
	return 100_000
}

// Prune of a large table runs beside holders whose 1s leases are renewed
// every third of a second: none loses its lease, and every idle row goes,
// while the held rows stay.
func TestPruneLargeTableKeepsLeases(t *testing.T) {
	for driver, fill := range map[string]string{
		"pgx": `INSERT INTO dlock_locks (name, token, acquired_at, expires_at)
			SELECT 'idle.' || i, i, now() - interval '1 day', 'epoch' FROM generate_series(1, %d) AS i`,
		"mysql": `INSERT INTO dlock_locks (name, token, acquired_at, expires_at)
			WITH RECURSIVE seq (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < %d)
			SELECT CONCAT('idle.', i), i, UTC_TIMESTAMP(6) - INTERVAL 1 DAY, '1970-01-01' FROM seq`,
	} {
		t.Run(driver, func(t *testing.T) {
			db := testenv.Fresh(t, driver)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			if err := migrations.Up(ctx, db); err != nil {
				t.Fatal(err)
			}
			rows := pruneRows(t)
			if driver == "mysql" {
				if _, err := db.ExecContext(ctx, "SET SESSION max_recursive_iterations = 4294967295"); err != nil {
					t.Logf("max_recursive_iterations: %v", err)
				}
				db.SetMaxOpenConns(1) // the session setting above holds for the fill
			}
			if _, err := db.ExecContext(ctx, fmt.Sprintf(fill, rows)); err != nil {
				t.Fatal(err)
			}
			db.SetMaxOpenConns(0)

			const holders = 4
			var wg sync.WaitGroup
			leases := make([]dlock.Lease, holders)
			for i := range leases {
				l := newLocker(t, db, dlock.WithTTL(time.Second))
				lease, err := l.Lock(ctx, fmt.Sprintf("%s.held.%d", dlocktest.Name(t), i))
				if err != nil {
					t.Fatal(err)
				}
				leases[i] = lease
			}
			start := time.Now()
			n, err := tablelock.Prune(ctx, db, 0)
			took := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("pruned %d rows in %v beside %d holders with a 1s TTL", n, took, holders)
			if n < int64(rows) {
				t.Errorf("pruned %d rows of %d idle ones", n, rows)
			}
			for i, lease := range leases {
				select {
				case <-lease.Done():
					t.Errorf("holder %d lost its lease during Prune: %v", i, lease.Err())
				default:
				}
				wg.Add(1)
				go func() { defer wg.Done(); _ = lease.Unlock(context.Background()) }()
			}
			wg.Wait()
			var left int
			if err := db.QueryRowContext(ctx, "SELECT count(*) FROM dlock_locks").Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != holders {
				t.Errorf("%d rows left, want the %d held ones", left, holders)
			}
		})
	}
}
