package drivers_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/XSAM/otelsql"
	_ "github.com/lib/pq" // registers "postgres"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/optimistic"
	"github.com/dlockhq/dlock/pessimistic"
	"github.com/dlockhq/dlock/tablelock"
)

// drivers are the ways of opening a database that dlock does not know by
// the driver's type.
var drivers = []struct {
	name     string
	migrated func(testing.TB) *sql.DB // brings the schema up, with a known driver
	open     func(testing.TB) (*sql.DB, error)
}{
	{"lib-pq", pg, func(t testing.TB) (*sql.DB, error) { return sql.Open("postgres", testenv.DSN("pgx")) }},
	{"otelsql-pgx", pg, func(t testing.TB) (*sql.DB, error) { return otelsql.Open("pgx", testenv.DSN("pgx")) }},
	{"otelsql-mysql", my, func(t testing.TB) (*sql.DB, error) { return otelsql.Open("mysql", testenv.DSN("mysql")) }},
}

func pg(t testing.TB) *sql.DB { return testenv.Migrated(t, testenv.Postgres) }
func my(t testing.TB) *sql.DB { return testenv.Migrated(t, testenv.MySQL) }

func open(t testing.TB, i int) *sql.DB {
	t.Helper()
	drivers[i].migrated(t)
	db, err := drivers[i].open(t)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxIdleConns(16)
	return db
}

func closing[L interface {
	dlock.Locker
	Close(context.Context) error
}](t *testing.T, l L, err error) dlock.Locker {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}

func TestTablelock(t *testing.T) {
	for i, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			db := open(t, i)
			dlocktest.Run(t, dlocktest.Harness{
				New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
					l, err := tablelock.New(db, opts...)
					return closing(t, l, err)
				},
				Workers: 4, Increments: 25,
				// Of these drivers only pgx's queues a waiter on
				// PostgreSQL; the others poll.
				WaitersUncounted: true,
			})
		})
	}
}

func TestAdvisory(t *testing.T) {
	for i, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			db := open(t, i)
			dlocktest.Run(t, dlocktest.Harness{
				New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
					l, err := advisory.New(db, opts...)
					return closing(t, l, err)
				},
				Workers: 4, Increments: 25,
			})
		})
	}
}

// counterTable makes a one-row table (id, n, version) for the
// transaction strategies; t.Cleanup drops it.
func counterTable(t *testing.T, db *sql.DB) string {
	t.Helper()
	name := fmt.Sprintf("drivers_counter_%d", rand.Uint32())
	ctx := context.Background()
	for _, q := range []string{
		"CREATE TABLE " + name + " (id INT PRIMARY KEY, n INT NOT NULL, version BIGINT NOT NULL)",
		"INSERT INTO " + name + " (id, n, version) VALUES (1, 0, 0)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { db.ExecContext(context.Background(), "DROP TABLE "+name) })
	return name
}

// incrementsAll runs f from 8 goroutines, 10 times each, and checks the
// counter counted every one.
func incrementsAll(t *testing.T, db *sql.DB, table string, f func(ctx context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	const workers, each = 8, 10
	errs := make(chan error, workers*each)
	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for range each {
				errs <- f(ctx)
			}
		}()
	}
	for range workers {
		<-done
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT n FROM "+table+" WHERE id = 1").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != workers*each {
		t.Fatalf("counter = %d, want %d", n, workers*each)
	}
}

func TestPessimistic(t *testing.T) {
	for i, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			db := open(t, i)
			table := counterTable(t, db)
			incrementsAll(t, db, table, func(ctx context.Context) error {
				return pessimistic.Do(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
					var n int
					if err := tx.QueryRowContext(ctx, "SELECT n FROM "+table+" WHERE id = 1 FOR UPDATE").Scan(&n); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, "UPDATE "+table+" SET n = n + 1 WHERE id = 1")
					return err
				}, pessimistic.WithLockTimeout(10*time.Second))
			})
		})
	}
}

func TestOptimistic(t *testing.T) {
	for i, d := range drivers {
		t.Run(d.name, func(t *testing.T) {
			db := open(t, i)
			table := counterTable(t, db)
			tab, err := optimistic.NewTable(db, table, "id", "version")
			if err != nil {
				t.Fatal(err)
			}
			policy := optimistic.Policy{MaxAttempts: 1000, Backoff: dlock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)}
			incrementsAll(t, db, table, func(ctx context.Context) error {
				return optimistic.Retry(ctx, policy, func(ctx context.Context) error {
					var n int
					v, err := tab.Get(ctx, db, 1, []string{"n"}, &n)
					if err != nil {
						return err
					}
					_, err = tab.Update(ctx, db, 1, v, map[string]any{"n": n + 1})
					return err
				})
			})
			if _, err := tab.Update(context.Background(), db, 1, -1, map[string]any{"n": 0}); !errors.Is(err, optimistic.ErrConflict) {
				t.Fatalf("Update at a stale version: %v, want ErrConflict", err)
			}
		})
	}
}
