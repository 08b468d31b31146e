package advisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dlockhq/dlock"
)

// The transaction-scoped locks record their token in application_name
// for the transaction only (set_config's is_local), so Inspect sees them.
const (
	pgTryTx = `
WITH l AS MATERIALIZED (SELECT pg_try_advisory_xact_lock($1) AS ok),
t AS MATERIALIZED (SELECT CASE WHEN ok THEN ` + pgClock + ` END AS token FROM l)
SELECT token,
	CASE WHEN token IS NOT NULL THEN set_config('application_name', left('dlock ' || token || ' tx', 63), true) END
FROM t`
	pgLockTx = `
WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock($1)),
t AS MATERIALIZED (SELECT ` + pgClock + ` AS token FROM l)
SELECT token, set_config('application_name', left('dlock ' || token || ' tx', 63), true) FROM t`
)

// TxOwner is the owner Inspect reports for a lock taken by LockTx or
// TryLockTx.
const TxOwner = "tx"

// LockTx takes name until tx ends (pg_advisory_xact_lock on PostgreSQL),
// waiting in the server's queue, and returns a fencing token. ctx governs
// the wait: when it ends the statement is cancelled and tx is aborted, as
// with any cancelled statement. There is no Unlock: commit or rollback
// releases the lock. This is the advisory lock that works behind a
// transaction-mode pooler such as PgBouncer's. PostgreSQL only: MySQL has
// no transaction-scoped named lock.
//
// l tells the dialect (tx must be on l's database): on MySQL, LockTx
// returns an error wrapping errors.ErrUnsupported before any I/O on tx.
func (l *Locker) LockTx(ctx context.Context, tx *sql.Tx, name string) (uint64, error) {
	if err := l.checkTx(ctx, tx, name); err != nil {
		return 0, err
	}
	var token int64
	var app string
	if err := tx.QueryRowContext(ctx, pgLockTx, PostgresKey(name)).Scan(&token, &app); err != nil {
		return 0, fmt.Errorf("advisory: lock %q in transaction: %w", name, err)
	}
	return uint64(token), nil
}

// TryLockTx is LockTx without waiting: ok is false when another session
// holds name.
func (l *Locker) TryLockTx(ctx context.Context, tx *sql.Tx, name string) (token uint64, ok bool, err error) {
	if err := l.checkTx(ctx, tx, name); err != nil {
		return 0, false, err
	}
	var t sql.NullInt64
	var app sql.NullString
	if err := tx.QueryRowContext(ctx, pgTryTx, PostgresKey(name)).Scan(&t, &app); err != nil {
		return 0, false, fmt.Errorf("advisory: try lock %q in transaction: %w", name, err)
	}
	return uint64(t.Int64), t.Valid, nil
}

func (l *Locker) checkTx(ctx context.Context, tx *sql.Tx, name string) error {
	if tx == nil {
		return errors.New("advisory: nil *sql.Tx")
	}
	if err := dlock.ValidateName(name); err != nil {
		return err
	}
	d, err := l.b.dialect(ctx)
	if err != nil {
		return err
	}
	if _, ok := d.(postgres); !ok {
		return fmt.Errorf("advisory: transaction-scoped locks are PostgreSQL's; MySQL/MariaDB has none: %w", errors.ErrUnsupported)
	}
	return l.b.checkedForTx(ctx)
}
