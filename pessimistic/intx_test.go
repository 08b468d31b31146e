package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/pessimistic"
)

// q writes a statement with the driver's placeholders ($1 or ?).
func q(driver, s string) string {
	if driver == "mysql" {
		return strings.NewReplacer("$1", "?", "$2", "?").Replace(s)
	}
	return s
}

// Inside the application's transaction, which already locked row 1, InTx
// locks it again without waiting (Do, a transaction of its own, would
// wait for the application's lock until ctx ends), and both writes
// commit with the application's transaction.
func TestInTxJoinsTheCallersLocks(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := rows(t, driver, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			if _, err := tx.ExecContext(ctx, "UPDATE t SET v = 1 WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			err = pessimistic.InTx(ctx, tx, func(ctx context.Context, tx *sql.Tx) error {
				var v int
				if err := tx.QueryRowContext(ctx, "SELECT v FROM t WHERE id = 1 "+clause(driver, pessimistic.ForUpdate)).Scan(&v); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, q(driver, "UPDATE t SET v = $1 WHERE id = 1"), v+1)
				return err
			}, pessimistic.WithLockTimeout(time.Second))
			if err != nil {
				t.Fatalf("InTx in the transaction that holds the row: %v", err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			var v int
			if err := db.QueryRowContext(ctx, "SELECT v FROM t WHERE id = 1").Scan(&v); err != nil || v != 2 {
				t.Fatalf("after commit v = %d (%v), want 2", v, err)
			}
		})
	}
}

// A lock wait past InTx's lock timeout fails with ErrLockTimeout at
// once, rolls fn's statements back to the savepoint, leaves the caller's
// transaction usable with its own work, and puts the caller's lock
// timeout back.
func TestInTxLockTimeoutKeepsTheCallersWork(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := rows(t, driver, 2)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			other, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Rollback()
			if _, err := other.ExecContext(ctx, "UPDATE t SET v = 9 WHERE id = 2"); err != nil {
				t.Fatal(err)
			}
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			timeoutQ := "SELECT current_setting('lock_timeout')"
			if driver == "mysql" {
				timeoutQ = "SELECT CAST(@@SESSION.innodb_lock_wait_timeout AS CHAR)"
			}
			var before, after string
			if err := tx.QueryRowContext(ctx, timeoutQ).Scan(&before); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, "UPDATE t SET v = 1 WHERE id = 1"); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = pessimistic.InTx(ctx, tx, func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, "UPDATE t SET v = 5 WHERE id = 1"); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, "UPDATE t SET v = 7 WHERE id = 2") // the other transaction's row
				return err
			}, pessimistic.WithLockTimeout(time.Second))
			if !errors.Is(err, pessimistic.ErrLockTimeout) {
				t.Fatalf("InTx waiting for another transaction's row: %v, want ErrLockTimeout", err)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Fatalf("InTx returned after %v with a 1s lock timeout", took)
			}
			if err := tx.QueryRowContext(ctx, timeoutQ).Scan(&after); err != nil {
				t.Fatalf("the caller's transaction after InTx failed: %v", err)
			}
			if after != before {
				t.Errorf("lock timeout %q after InTx, was %q", after, before)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			var v int
			if err := db.QueryRowContext(ctx, "SELECT v FROM t WHERE id = 1").Scan(&v); err != nil || v != 1 {
				t.Fatalf("row 1 = %d (%v): want the caller's 1, fn's 5 rolled back", v, err)
			}
		})
	}
}

// fn's panic rolls its statements back and goes on; the transaction
// stays the caller's to commit.
func TestInTxPanicRollsBackToTheSavepoint(t *testing.T) {
	db := rows(t, "pgx", 1)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic did not go on")
			}
		}()
		_ = pessimistic.InTx(ctx, tx, func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "UPDATE t SET v = 5 WHERE id = 1"); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := db.QueryRowContext(ctx, "SELECT v FROM t WHERE id = 1").Scan(&v); err != nil || v != 0 {
		t.Fatalf("row 1 = %d (%v) after fn panicked, want 0", v, err)
	}
}

// InPgxTx joins a pgx transaction the same way.
func TestInPgxTx(t *testing.T) {
	testenv.Postgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testenv.DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TEMPORARY TABLE t (id int PRIMARY KEY, v int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO t VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "UPDATE t SET v = 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	err = pessimistic.InPgxTx(ctx, tx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE t SET v = v + 1 WHERE id = (SELECT id FROM t WHERE id = 1 FOR UPDATE)")
		return err
	}, pessimistic.WithLockTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := conn.QueryRow(ctx, "SELECT v FROM t WHERE id = 1").Scan(&v); err != nil || v != 2 {
		t.Fatalf("v = %d (%v), want 2", v, err)
	}
}

// Bad input is refused before any I/O, with one line: options that only
// a transaction of Do's own has a use for, nil arguments.
func TestInTxBadInput(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context, *sql.Tx) error { return nil }
	tx := new(sql.Tx) // never used: refused before
	for what, err := range map[string]error{
		"nil tx":          pessimistic.InTx(ctx, nil, fn),
		"nil fn":          pessimistic.InTx(ctx, tx, nil),
		"WithMaxAttempts": pessimistic.InTx(ctx, tx, fn, pessimistic.WithMaxAttempts(3)),
		"WithTxOptions":   pessimistic.InTx(ctx, tx, fn, pessimistic.WithTxOptions(&sql.TxOptions{})),
		"negative":        pessimistic.InTx(ctx, tx, fn, pessimistic.WithLockTimeout(-time.Second)),
		"nil pgx.Tx":      pessimistic.InPgxTx(ctx, nil, func(context.Context, pgx.Tx) error { return nil }),
	} {
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line", what, err)
		}
	}
}
