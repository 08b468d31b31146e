package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/pessimistic"
)

var drivers = append([]string{"pgx", "mysql"}, testenv.PGDrivers...)

// rows makes table t(id int primary key, v int) with rows 1..n in a
// database of the test's own.
func rows(t *testing.T, driver string, n int) *sql.DB {
	t.Helper()
	db := testenv.Fresh(t, driver)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES ("+strconv.Itoa(i)+", 0)"); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func clause(driver string, c pessimistic.Clause) string {
	if driver == "mysql" {
		return c.MySQL()
	}
	return c.Postgres()
}

// Two transactions contend for one row: the second waits for the first
// and then sees its write.
func TestForUpdateWaitsAndSeesWrite(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := rows(t, driver, 1)
			ctx := context.Background()
			locked := make(chan struct{})
			release := make(chan struct{})
			first := make(chan error, 1)
			go func() {
				first <- pessimistic.Do(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
					var v int
					if err := tx.QueryRowContext(ctx, "SELECT v FROM t WHERE id = 1 "+clause(driver, pessimistic.ForUpdate)).Scan(&v); err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, "UPDATE t SET v = 42 WHERE id = 1"); err != nil {
						return err
					}
					close(locked)
					<-release
					return nil
				})
			}()
			<-locked
			seen := make(chan int, 1)
			second := make(chan error, 1)
			go func() {
				second <- pessimistic.Do(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
					var v int
					err := tx.QueryRowContext(ctx, "SELECT v FROM t WHERE id = 1 "+clause(driver, pessimistic.ForUpdate)).Scan(&v)
					seen <- v
					return err
				})
			}()
			select {
			case v := <-seen:
				t.Fatalf("second locking read returned %d while the first transaction held the row", v)
			case <-time.After(200 * time.Millisecond):
			}
			close(release)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			if err := <-second; err != nil {
				t.Fatal(err)
			}
			if v := <-seen; v != 42 {
				t.Fatalf("second transaction read %d after waiting, want the first's 42", v)
			}
		})
	}
}

// holdRow locks row id in a transaction until the returned func is called.
func holdRow(t *testing.T, db *sql.DB, driver string, id string) func() {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := tx.QueryRow("SELECT v FROM t WHERE id = " + id + " " + clause(driver, pessimistic.ForUpdate)).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return func() { tx.Rollback() }
}

func TestNoWaitFailsAtOnce(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := rows(t, driver, 1)
			defer holdRow(t, db, driver, "1")()
			err := pessimistic.Do(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
				var v int
				return tx.QueryRowContext(ctx, "SELECT v FROM t WHERE id = 1 "+clause(driver, pessimistic.ForUpdateNoWait)).Scan(&v)
			})
			if !pessimistic.IsLockNotAvailable(err) || !errors.Is(err, pessimistic.ErrLockTimeout) {
				t.Fatalf("NOWAIT on a locked row: %v, want lock not available", err)
			}
		})
	}
}

func TestSkipLockedSkips(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := rows(t, driver, 2)
			defer holdRow(t, db, driver, "1")()
			var got int
			err := pessimistic.Do(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
				return tx.QueryRowContext(ctx, "SELECT id FROM t ORDER BY id LIMIT 1 "+clause(driver, pessimistic.ForUpdateSkipLocked)).Scan(&got)
			})
			if err != nil || got != 2 {
				t.Fatalf("SKIP LOCKED returned row %d (err %v), want row 2", got, err)
			}
		})
	}
}

func TestLockTimeout(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := rows(t, driver, 1)
			defer holdRow(t, db, driver, "1")()
			err := pessimistic.Do(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "UPDATE t SET v = 1 WHERE id = 1")
				return err
			}, pessimistic.WithLockTimeout(200*time.Millisecond))
			if !errors.Is(err, pessimistic.ErrLockTimeout) {
				t.Fatalf("update of a locked row with a lock timeout: %v, want ErrLockTimeout", err)
			}
			if driver == "mysql" { // the session's own timeout is back
				var secs int
				if err := db.QueryRow("SELECT @@SESSION.innodb_lock_wait_timeout = @@GLOBAL.innodb_lock_wait_timeout").Scan(&secs); err != nil || secs != 1 {
					t.Fatalf("innodb_lock_wait_timeout not restored on the pooled session (err %v)", err)
				}
			}
		})
	}
}

// The longest lock timeout is one both servers take, as the settings'
// own units: a row locked by nobody is written at once.
func TestLongestLockTimeout(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := rows(t, driver, 1)
			err := pessimistic.Do(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "UPDATE t SET v = 1 WHERE id = 1")
				return err
			}, pessimistic.WithLockTimeout(pessimistic.MaxLockTimeout))
			if err != nil {
				t.Fatalf("Do with MaxLockTimeout: %v", err)
			}
		})
	}
}

// Two transactions lock two rows in opposite orders: the server breaks
// the deadlock by aborting one, Do retries it, and both commit.
func TestDeadlockRetried(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := rows(t, driver, 2)
			attempts := opposite(t, "t", func(body func(exec func(q string) error) error) error {
				return pessimistic.Do(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
					return body(func(q string) error { _, err := tx.ExecContext(ctx, q); return err })
				})
			})
			if attempts < 3 {
				t.Fatalf("%d attempts: the deadlock was not provoked or not retried", attempts)
			}
			var sum int
			if err := db.QueryRow("SELECT SUM(v) FROM t").Scan(&sum); err != nil || sum != 4 {
				t.Fatalf("sum = %d (err %v), want 4: each committed transaction adds 2", sum, err)
			}
		})
	}
}

// opposite runs two transactions through do, the first adding 1 to rows
// 1 then 2 of table, the second to rows 2 then 1, each waiting for the
// other after its first update so that they deadlock; it fails t unless
// both commit, and returns how many attempts they made between them.
func opposite(t *testing.T, table string, do func(body func(exec func(q string) error) error) error) int32 {
	t.Helper()
	var attempts atomic.Int32
	var barrier sync.WaitGroup
	barrier.Add(2)
	var once [2]sync.Once
	errs := make(chan error, 2)
	for i, order := range [2][2]string{{"1", "2"}, {"2", "1"}} {
		go func() {
			errs <- do(func(exec func(q string) error) error {
				attempts.Add(1)
				if err := exec("UPDATE " + table + " SET v = v + 1 WHERE id = " + order[0]); err != nil {
					return err
				}
				once[i].Do(func() { barrier.Done(); barrier.Wait() })
				return exec("UPDATE " + table + " SET v = v + 1 WHERE id = " + order[1])
			})
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	return attempts.Load()
}

func TestPanicRollsBack(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := rows(t, driver, 1)
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("panic did not propagate")
					}
				}()
				pessimistic.Do(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
					tx.ExecContext(ctx, "UPDATE t SET v = 7 WHERE id = 1")
					panic("boom")
				})
			}()
			var v int
			if err := db.QueryRow("SELECT v FROM t WHERE id = 1").Scan(&v); err != nil || v != 0 {
				t.Fatalf("v = %d (err %v) after a panicking transaction, want 0", v, err)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context, *sql.Tx) error { return nil }
	unreachable, _ := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	defer unreachable.Close()
	for what, err := range map[string]error{
		"nil db":           pessimistic.Do(ctx, nil, fn),
		"nil fn":           pessimistic.Do(ctx, unreachable, nil),
		"zero attempts":    pessimistic.Do(ctx, unreachable, fn, pessimistic.WithMaxAttempts(0)),
		"negative timeout": pessimistic.Do(ctx, unreachable, fn, pessimistic.WithLockTimeout(-time.Second)),
		"timeout too long": pessimistic.Do(ctx, unreachable, fn, pessimistic.WithLockTimeout(pessimistic.MaxLockTimeout+time.Millisecond)),
		"nil option":       pessimistic.Do(ctx, unreachable, fn, nil),
	} {
		if err == nil || pessimistic.IsConnectionLost(err) || !strings.HasPrefix(err.Error(), "pessimistic:") {
			t.Errorf("%s: %v, want a validation error before any I/O", what, err)
		}
	}
}
