package advisory_test

import (
	"database/sql"
	"testing"

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

// BenchmarkHerd counts the statements per hand-off with 64 waiters, each
// a Locker of its own: on MySQL by the server's counter, on PostgreSQL as
// pgx sends them (testenv.PGCounter).
func BenchmarkHerd(b *testing.B) {
	b.Run("mysql", func(b *testing.B) {
		db := migrated(b, testenv.MySQL)
		dlocktest.BenchHerd(b, newLocker(b, db), herd(b, db), testenv.MySQLQuestions(db))
	})
	b.Run("postgres", func(b *testing.B) {
		var count testenv.PGCounter
		db := migrated(b, count.Open)
		dlocktest.BenchHerd(b, newLocker(b, db), herd(b, db), count.Requests())
	})
}

// herd is BenchHerd's 64 waiters on db.
func herd(b *testing.B, db *sql.DB) []dlock.Locker {
	waiters := make([]dlock.Locker, 64)
	for i := range waiters {
		waiters[i] = newLocker(b, db)
	}
	return waiters
}

// BenchmarkUncontendedRaw is W1 on the bare primitive the package wraps
// (pg_advisory_lock, GET_LOCK), beside BenchmarkUncontended: the target dlock's figures are
// measured against.
func BenchmarkUncontendedRaw(b *testing.B) { testenv.Uncontended(b, raw) }

// BenchmarkContendedRaw is W2 on the bare primitive, beside
// BenchmarkContended.
func BenchmarkContendedRaw(b *testing.B) { testenv.Contended(b, raw) }

// BenchmarkSeckillRaw is W3 on the bare primitive, beside BenchmarkSeckill.
func BenchmarkSeckillRaw(b *testing.B) { testenv.Seckill(b, raw) }

// raw is the bare advisory lock on db.
func raw(_ *testing.B, db *sql.DB, driver string) dlock.Locker {
	return testenv.RawAdvisory(db, driver)
}

// BenchmarkBinlog is W1 on MySQL, dlock's advisory lock beside raw
// GET_LOCK, on throwaway MariaDB servers: one without a binary log, where
// the holder rows (dlock_fences) are in memory, and one that writes a
// binary log and syncs it at every commit (log_bin and sync_binlog = 1,
// MySQL 8's defaults), where they are InnoDB and an acquire's write
// waits for the redo log's flush and the binary log's sync. Not part of
// make bench: run it with -bench Binlog.
func BenchmarkBinlog(b *testing.B) {
	for _, server := range []struct {
		name string
		args []string
	}{
		{"off", nil},
		{"sync", []string{"--log-bin=binlog", "--server-id=1", "--sync-binlog=1"}},
	} {
		b.Run(server.name, func(b *testing.B) {
			srv := testenv.MariaDBServerWith(b, server.args...)
			db := migrated(b, func(t testing.TB) *sql.DB { return testenv.Open(t, "mysql", srv.DSN) })
			b.Run("dlock", func(b *testing.B) { dlocktest.BenchUncontended(b, newLocker(b, db), testenv.SelectOne(db)) })
			b.Run("raw", func(b *testing.B) { dlocktest.BenchUncontended(b, raw(b, db, "mysql"), testenv.SelectOne(db)) })
		})
	}
}
