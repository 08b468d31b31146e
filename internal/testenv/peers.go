package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"

	"github.com/dlockhq/dlock"
)

// The bare server primitives the SQL backends wrap, driven through
// dlock.Locker only so that the benchmarks run the same workloads on them
// in the same run: no token, no renewal, no expiry, no re-entry. They are
// what a user calling pg_advisory_lock, GET_LOCK or SELECT … FOR UPDATE
// with the driver gets.

// rawLease is a raw primitive's hold: Unlock is all the benchmarks call.
type rawLease struct {
	dlock.Lease
	unlock func(context.Context) error
}

func (l *rawLease) Unlock(ctx context.Context) error { return l.unlock(ctx) }

// Token is 0: the bare primitives give no fencing token.
func (l *rawLease) Token() uint64 { return 0 }

// rawLocker locks with lock and needs nothing else.
type rawLocker struct {
	lock func(ctx context.Context, name string) (func(context.Context) error, error)
}

func (l rawLocker) Lock(ctx context.Context, name string) (dlock.Lease, error) {
	unlock, err := l.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	return &rawLease{unlock: unlock}, nil
}

func (l rawLocker) TryLock(ctx context.Context, name string) (dlock.Lease, error) {
	return l.Lock(ctx, name)
}

func key(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}

// RawAdvisory is pg_advisory_lock (driver "pgx") or GET_LOCK ("mysql") on
// a connection pinned for the hold.
func RawAdvisory(db *sql.DB, driver string) dlock.Locker {
	return rawLocker{func(ctx context.Context, name string) (func(context.Context) error, error) {
		conn, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		lock, unlock, arg := "SELECT true FROM (SELECT pg_advisory_lock($1)) l", "SELECT pg_advisory_unlock($1)", any(key(name))
		if driver == "mysql" {
			// MariaDB refuses a negative (infinite) timeout with NULL at
			// once, and a warning: a year is as good.
			lock, unlock, arg = "SELECT GET_LOCK(?, 31536000) = 1", "SELECT RELEASE_LOCK(?)", any(name)
		}
		var got sql.NullBool
		if err := conn.QueryRowContext(ctx, lock, arg).Scan(&got); err != nil || !got.Valid || !got.Bool {
			_ = conn.Close()
			return nil, errors.Join(err, fmt.Errorf("raw advisory lock of %q not taken", name))
		}
		return func(ctx context.Context) error {
			_, err := conn.ExecContext(ctx, unlock, arg)
			return errors.Join(err, conn.Close())
		}, nil
	}}
}

// RawForUpdate is a transaction holding the row lock of the name's row in
// dlock_bench_rows (SELECT … FOR UPDATE), committed by Unlock. The table is
// created in db if missing.
func RawForUpdate(ctx context.Context, db *sql.DB, driver string) (dlock.Locker, error) {
	if _, err := db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS dlock_bench_rows (name varchar(255) PRIMARY KEY)"); err != nil {
		return nil, err
	}
	insert, lock := "INSERT INTO dlock_bench_rows VALUES ($1) ON CONFLICT DO NOTHING", "SELECT name FROM dlock_bench_rows WHERE name = $1 FOR UPDATE"
	if driver == "mysql" {
		insert, lock = "INSERT IGNORE INTO dlock_bench_rows VALUES (?)", "SELECT name FROM dlock_bench_rows WHERE name = ? FOR UPDATE"
	}
	var made sync.Map // names whose row exists
	return rawLocker{func(ctx context.Context, name string) (func(context.Context) error, error) {
		if _, ok := made.Load(name); !ok {
			if _, err := db.ExecContext(ctx, insert, name); err != nil {
				return nil, err
			}
			made.Store(name, true)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		var got string
		if err := tx.QueryRowContext(ctx, lock, name).Scan(&got); err != nil {
			return nil, errors.Join(err, tx.Rollback())
		}
		return func(context.Context) error { return tx.Commit() }, nil
	}}, nil
}
