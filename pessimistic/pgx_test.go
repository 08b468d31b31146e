package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/pessimistic"
)

// pgxRows makes a table of the test's own, (id int primary key, v int)
// with rows 1..n, on a pgx pool, and returns the pool and the table's
// name.
func pgxRows(t *testing.T, n int) (*pgxpool.Pool, string) {
	t.Helper()
	pool := testenv.PgxPool(t)
	ctx := context.Background()
	table := fmt.Sprintf("pgx_rows_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (id int PRIMARY KEY, v int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+table) })
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" SELECT g, 0 FROM generate_series(1, $1) g", n); err != nil {
		t.Fatal(err)
	}
	return pool, table
}

// DoPgx commits fn's writes, and leaves nothing of a failed or panicking
// fn.
func TestDoPgxCommitsOrRollsBack(t *testing.T) {
	pool, table := pgxRows(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	value := func() int {
		var v int
		if err := pool.QueryRow(ctx, "SELECT v FROM "+table+" WHERE id = 1").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	err := pessimistic.DoPgx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET v = v + 1 WHERE id = (SELECT id FROM "+table+" WHERE id = 1 FOR UPDATE)")
		return err
	})
	if err != nil || value() != 1 {
		t.Fatalf("DoPgx: %v, v = %d, want 1", err, value())
	}
	failed := errors.New("fn failed")
	err = pessimistic.DoPgx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE "+table+" SET v = 100 WHERE id = 1"); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) || value() != 1 {
		t.Fatalf("DoPgx of a failing fn: %v, v = %d, want fn's error and 1", err, value())
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not go on")
			}
		}()
		_ = pessimistic.DoPgx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			_, _ = tx.Exec(ctx, "UPDATE "+table+" SET v = 7 WHERE id = 1")
			panic("boom")
		})
	}()
	if v := value(); v != 1 {
		t.Fatalf("v = %d after a panicking fn, want 1", v)
	}
	if stat := pool.Stat(); stat.AcquiredConns() != 0 {
		t.Fatalf("%d connections still acquired after DoPgx returned", stat.AcquiredConns())
	}
}

// Two transactions lock two rows in opposite orders: PostgreSQL aborts
// one, DoPgx runs it again, and both commit. A lock timeout ends a wait
// with ErrLockTimeout.
func TestDoPgxRetriesDeadlocksAndTimesOut(t *testing.T) {
	pool, table := pgxRows(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	attempts := opposite(t, table, func(body func(exec func(q string) error) error) error {
		return pessimistic.DoPgx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
			return body(func(q string) error { _, err := tx.Exec(ctx, q); return err })
		})
	})
	if attempts < 3 {
		t.Fatalf("%d attempts: the deadlock was not provoked or not retried", attempts)
	}
	var sum int
	if err := pool.QueryRow(ctx, "SELECT SUM(v) FROM "+table).Scan(&sum); err != nil || sum != 4 {
		t.Fatalf("sum = %d (%v), want 4", sum, err)
	}

	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.Background()) }()
	if _, err := holder.Exec(ctx, "SELECT 1 FROM "+table+" WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	err = pessimistic.DoPgx(ctx, pool, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE "+table+" SET v = 0 WHERE id = 1")
		return err
	}, pessimistic.WithLockTimeout(200*time.Millisecond))
	if !errors.Is(err, pessimistic.ErrLockTimeout) {
		t.Fatalf("DoPgx on a locked row with a lock timeout: %v, want ErrLockTimeout", err)
	}
}

// Bad input is refused before any I/O.
func TestDoPgxBadInput(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context, pgx.Tx) error { return nil }
	unreachable, err := pgxpool.New(ctx, "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer unreachable.Close()
	for what, err := range map[string]error{
		"nil pool":      pessimistic.DoPgx(ctx, nil, fn),
		"nil fn":        pessimistic.DoPgx(ctx, unreachable, nil),
		"zero attempts": pessimistic.DoPgx(ctx, unreachable, fn, pessimistic.WithMaxAttempts(0)),
		"no such level": pessimistic.DoPgx(ctx, unreachable, fn, pessimistic.WithTxOptions(&sql.TxOptions{Isolation: sql.LevelLinearizable})),
	} {
		if err == nil || pessimistic.IsConnectionLost(err) || !strings.HasPrefix(err.Error(), "pessimistic:") {
			t.Errorf("%s: %v, want a validation error before any I/O", what, err)
		}
	}
}
