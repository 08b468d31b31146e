package pessimistic_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/pessimistic"
)

// Through PgBouncer's transaction pooling a transaction keeps its server
// session from BEGIN to COMMIT: Do's SELECT … FOR UPDATE excludes as it
// does directly (and its lock_timeout, set for the transaction alone,
// does not leak to the next client of the session).
func TestThroughPgBouncer(t *testing.T) {
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			db := testenv.Open(t, "pgx", testenv.PgBouncerDSN(t, "transaction", mode))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			table := fmt.Sprintf("pessimistic_pgbouncer_%s_%d", mode, time.Now().UnixNano())
			for _, q := range []string{"CREATE TABLE " + table + " (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO " + table + " VALUES (1, 0)"} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE "+table) })
			const workers, each = 8, 10
			if err := incrementConcurrently(ctx, []*sql.DB{db}, table, "$1", workers, each, pessimistic.WithLockTimeout(5*time.Second)); err != nil {
				t.Fatal(err)
			}
			var v int
			var timeout string
			if err := db.QueryRowContext(ctx, "SELECT v, current_setting('lock_timeout') FROM "+table+" WHERE id = 1").Scan(&v, &timeout); err != nil || v != workers*each {
				t.Fatalf("v = %d (err %v), want %d", v, err, workers*each)
			}
			if timeout != "0" {
				t.Errorf("lock_timeout %q outside Do's transactions, want the server's 0", timeout)
			}
		})
	}
}
