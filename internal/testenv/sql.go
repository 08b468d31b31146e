package testenv

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/election/electiontest"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
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
// Lockers mk makes (SQLHarness). The conformance, election and
// scheduled-job tests of the SQL backends are this with their suite.
func OnSQL[L dlock.Locker](t *testing.T, mk func(testing.TB, *sql.DB, ...dlock.Option) L, suite func(*testing.T, dlocktest.Harness)) {
	for _, d := range SQLDatabases {
		t.Run(d.Name, func(t *testing.T) {
			db := Migrated(t, d.Open)
			suite(t, SQLHarness(d.Driver, d.Open, db, mk))
		})
	}
}

// OnPGModes runs suite as OnSQL does, on PostgreSQL under each of pgx's
// other query modes (PGQueryModes), without the slow-server rounds: they
// are about time, not the protocol, and OnSQL runs them. The modes run
// in parallel: the suites mostly wait.
func OnPGModes[L dlock.Locker](t *testing.T, mk func(testing.TB, *sql.DB, ...dlock.Option) L, suite func(*testing.T, dlocktest.Harness)) {
	for _, mode := range PGQueryModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			open := PostgresMode(mode)
			h := SQLHarness("pgx", open, Migrated(t, open), mk)
			h.Dial = nil
			suite(t, h)
		})
	}
}

// Suites runs the conformance, election and job suites on h: what a
// SQL backend runs in each pgx query mode and through a pooler.
func Suites(t *testing.T, h dlocktest.Harness) {
	t.Run("Conformance", func(t *testing.T) { dlocktest.Run(t, h) })
	t.Run("Election", func(t *testing.T) {
		electiontest.Run(t, electiontest.Harness{New: h.New, Broken: h.Broken})
	})
	t.Run("Jobs", func(t *testing.T) { schedlocktest.Run(t, schedlocktest.Harness{New: h.New}) })
}

// SQLHarness is the harness of the Lockers mk makes on a database of
// driver: New on db (migrated), Broken on one open opened and closed at
// once, Dial on a database reached through a proxy in front of Addr.
func SQLHarness[L dlock.Locker](driver string, open func(testing.TB) *sql.DB, db *sql.DB, mk func(testing.TB, *sql.DB, ...dlock.Option) L) dlocktest.Harness {
	return dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { return mk(t, db, opts...) },
		Broken: func(t *testing.T) dlock.Locker {
			closed := open(t)
			l := mk(t, closed)
			closed.Close()
			return l
		},
		Dial: func(t *testing.T, addr string, opts ...dlock.Option) dlock.Locker {
			return mk(t, ViaAddr(t, driver, addr), opts...)
		},
		Addr: sqlAddr(driver),
	}
}

// RowStall returns a Harness.Stall for the lock table on db: it takes
// the row lock of name's row (which must exist) in a transaction left
// open, so every statement on the name waits until resume rolls it back.
func RowStall(db *sql.DB, driver string) func(t *testing.T, name string) (resume func()) {
	q := "SELECT name FROM dlock_locks WHERE name = $1 FOR UPDATE"
	if driver == "mysql" {
		q = "SELECT name FROM dlock_locks WHERE name = ? FOR UPDATE"
	}
	return func(t *testing.T, name string) func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			cancel()
			t.Fatalf("stalling %q: %v", name, err)
		}
		var got string
		if err := tx.QueryRowContext(ctx, q, name).Scan(&got); err != nil {
			_ = tx.Rollback()
			cancel()
			t.Fatalf("stalling %q (its row must exist): %v", name, err)
		}
		var once sync.Once
		resume := func() {
			once.Do(func() {
				_ = tx.Rollback()
				cancel()
			})
		}
		t.Cleanup(resume)
		return resume
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

// sqlAddr is the host:port of the test database of driver ("pgx" or
// "mysql"), or "" when its DSN does not parse (Dial's proxy then fails
// its test with the reason).
func sqlAddr(driver string) string {
	addr, _ := withAddr(driver, DSN(driver), "")
	return addr
}

// ViaAddr opens the test database of driver through addr (a proxy in
// front of the harness's Addr); t.Cleanup closes it.
func ViaAddr(t testing.TB, driver, addr string) *sql.DB {
	t.Helper()
	dsn, err := withAddr(driver, DSN(driver), addr)
	if err != nil {
		t.Fatal(err)
	}
	return Open(t, driver, dsn)
}
