package testenv

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/migrations"
)

// SQLDatabases are the SQL servers the SQL backends' tests run against.
var SQLDatabases = []struct {
	Name   string
	Driver string // "pgx" or "mysql"
	Open   func(testing.TB) *sql.DB
}{
	{"postgres", "pgx", Postgres},
	{"mysql", "mysql", MySQL},
}

// Migrated opens a database with open and brings dlock's schema up to date.
func Migrated(t testing.TB, open func(testing.TB) *sql.DB) *sql.DB {
	t.Helper()
	db := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db
}

// OnSQL runs suite on each SQL test database with a harness of the
// Lockers mk makes: New on the migrated database, Broken on one closed at
// once. The conformance, election and scheduled-job tests of the SQL
// backends are this with their suite.
func OnSQL[L dlock.Locker](t *testing.T, mk func(testing.TB, *sql.DB, ...dlock.Option) L, suite func(*testing.T, dlocktest.Harness)) {
	for _, d := range SQLDatabases {
		t.Run(d.Name, func(t *testing.T) {
			db := Migrated(t, d.Open)
			suite(t, dlocktest.Harness{
				New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { return mk(t, db, opts...) },
				Broken: func(t *testing.T) dlock.Locker {
					closed := d.Open(t)
					l := mk(t, closed)
					closed.Close()
					return l
				},
			})
		})
	}
}

// SelectOne is a bare round trip to db, the unit of the SQL benchmarks.
func SelectOne(db *sql.DB) func(context.Context) error {
	return func(ctx context.Context) error {
		var one int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	}
}

// Closing closes c when t ends, with a fresh context, and reports an
// error from it.
func Closing[C interface{ Close(context.Context) error }](t testing.TB, c C) C {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// Pools of workload W3 (BenchSeckill). Its 100 buyers waiting
// on a bare server lock would each take a connection, past PostgreSQL's
// default max_connections of 100; an application bounds its pools, and
// waiters past the bound queue in database/sql.
const (
	// SaleConns bounds the pool of the stock and orders database.
	SaleConns = 10
	// SaleLockConns bounds the pool of a SQL lock's Lockers.
	SaleLockConns = 40
)

// SaleDB opens W3's stock and orders database with open, its pool bounded
// to SaleConns.
func SaleDB(t testing.TB, open func(testing.TB) *sql.DB) *sql.DB {
	db := open(t)
	db.SetMaxOpenConns(SaleConns)
	return db
}

// SQLLocker makes a Locker on db, a database of driver ("pgx" or
// "mysql"): dlock's, or a raw primitive for its benchmarks.
type SQLLocker func(b *testing.B, db *sql.DB, driver string) dlock.Locker

// Uncontended runs W1 (dlocktest.BenchUncontended) on each of
// SQLDatabases, through the Locker mk makes on a migrated database.
func Uncontended(b *testing.B, mk SQLLocker) {
	for _, d := range SQLDatabases {
		b.Run(d.Name, func(b *testing.B) {
			db := Migrated(b, d.Open)
			dlocktest.BenchUncontended(b, mk(b, db, d.Driver), SelectOne(db))
		})
	}
}

// Contended runs W2 (dlocktest.BenchContended) on each of SQLDatabases;
// each contender has its own pool, as a separate process would.
func Contended(b *testing.B, mk SQLLocker) {
	for _, d := range SQLDatabases {
		b.Run(d.Name, func(b *testing.B) {
			db := Migrated(b, d.Open)
			dlocktest.BenchContended(b, func(b *testing.B) dlock.Locker { return mk(b, d.Open(b), d.Driver) }, SelectOne(db))
		})
	}
}

// Seckill runs W3 (BenchSeckill) on each of SQLDatabases,
// through the Locker mk makes on a migrated database whose pool is bounded
// to SaleLockConns; the stock is on a pool of its own (SaleDB).
func Seckill(b *testing.B, mk SQLLocker) {
	for _, d := range SQLDatabases {
		b.Run(d.Name, func(b *testing.B) {
			db := Migrated(b, d.Open)
			db.SetMaxOpenConns(SaleLockConns)
			BenchSeckill(b, mk(b, db, d.Driver), SaleDB(b, d.Open))
		})
	}
}

// MySQLQuestions counts the statements MySQL served its clients (SHOW
// GLOBAL STATUS Questions), for dlocktest.BenchHerd. PostgreSQL has no
// such live counter: its statistics reach pg_stat_database up to seconds
// late.
func MySQLQuestions(db *sql.DB) dlocktest.Requests {
	return func(ctx context.Context) (int64, error) {
		var name string
		var n int64
		err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n)
		return n, err
	}
}
