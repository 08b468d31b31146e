package tablelock_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// locker is the package's Locker, for the benchmarks.
func locker(b *testing.B, db *sql.DB, _ string) dlock.Locker { return newLocker(b, db) }

func BenchmarkUncontended(b *testing.B) { testenv.Uncontended(b, locker) }

func BenchmarkContended(b *testing.B) { testenv.Contended(b, locker) }

// BenchmarkSeckill is W3 through one Locker shared by the buyers; stock
// and orders are in the same server, on a pool of their own.
func BenchmarkSeckill(b *testing.B) { testenv.Seckill(b, locker) }

// BenchmarkHerd counts the statements per hand-off with 64 waiters: on
// MySQL by the server's counter, on PostgreSQL as pgx sends them
// (testenv.PGCounter). The waiters are 64 Lockers on one pool, then 16
// processes of 4 (a pool each; on PostgreSQL, a LISTEN connection each).
func BenchmarkHerd(b *testing.B) {
	for _, procs := range []int{1, 16} {
		b.Run(fmt.Sprintf("mysql/processes=%d", procs), func(b *testing.B) {
			herd(b, procs, func(b *testing.B) *sql.DB { return migrated(b, testenv.MySQL) }, testenv.MySQLQuestions(migrated(b, testenv.MySQL)))
		})
	}
	for _, procs := range []int{1, 16} {
		b.Run(fmt.Sprintf("postgres/processes=%d", procs), func(b *testing.B) {
			var count testenv.PGCounter
			herd(b, procs, func(b *testing.B) *sql.DB { return migrated(b, count.Open) }, count.Requests())
		})
	}
}

// herd is BenchHerd with 64 waiting Lockers spread over procs pools
// opened by open, the holder on the first.
func herd(b *testing.B, procs int, open func(*testing.B) *sql.DB, requests dlocktest.Requests) {
	dbs := make([]*sql.DB, procs)
	for i := range dbs {
		dbs[i] = open(b)
		dbs[i].SetMaxOpenConns(64/procs + 1)
	}
	waiters := make([]dlock.Locker, 64)
	for i := range waiters {
		waiters[i] = newLocker(b, dbs[i%procs])
	}
	dlocktest.BenchHerd(b, newLocker(b, dbs[0]), waiters, requests)
}

// BenchmarkUncontendedRaw is W1 on the bare primitive the package wraps
// (a SELECT … FOR UPDATE transaction), beside BenchmarkUncontended: the target dlock's figures are
// measured against.
func BenchmarkUncontendedRaw(b *testing.B) { testenv.Uncontended(b, raw) }

// BenchmarkContendedRaw is W2 on the bare primitive, beside
// BenchmarkContended.
func BenchmarkContendedRaw(b *testing.B) { testenv.Contended(b, raw) }

// BenchmarkSeckillRaw is W3 on the bare primitive, beside BenchmarkSeckill.
func BenchmarkSeckillRaw(b *testing.B) { testenv.Seckill(b, raw) }

// raw is the bare SELECT … FOR UPDATE transaction on db.
func raw(b *testing.B, db *sql.DB, driver string) dlock.Locker {
	l, err := testenv.RawForUpdate(context.Background(), db, driver)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkAfterABurst is W1 on PostgreSQL a few seconds after 30 other
// processes each waited for a name once: what their idle LISTEN
// connections cost a lock that nobody else wants. Before PostgreSQL 19
// every NOTIFY in the database signals every listening backend, and a
// release that finds nobody queued notifies. It reports the cycle and
// how many of the 30 still listened when the cycles began. Not part of
// make bench: run it with -bench AfterABurst.
func BenchmarkAfterABurst(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*dlocktest.Timeout)
	defer cancel()
	admin := migrated(b, testenv.Postgres)
	name := dlocktest.Name(b)
	first, err := newLocker(b, admin).Lock(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	const procs = 30
	done := make(chan error, procs)
	for range procs {
		l := newLocker(b, migrated(b, testenv.Postgres))
		go func() {
			lease, err := l.Lock(ctx, name)
			if err == nil {
				err = lease.Unlock(ctx)
			}
			done <- err
		}()
	}
	time.Sleep(2 * time.Second) // every process queued
	if err := first.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	for range procs {
		if err := <-done; err != nil {
			b.Fatal(err)
		}
	}
	time.Sleep(8 * time.Second) // past a listener's default linger (6s)
	var listening int
	if err := admin.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN dlock_locks%'").Scan(&listening); err != nil {
		b.Fatal(err)
	}
	dlocktest.BenchUncontended(b, newLocker(b, admin), testenv.SelectOne(admin))
	b.ReportMetric(float64(listening), "listening")
}
