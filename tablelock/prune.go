package tablelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock/internal/sqldialect"
)

// A row is pruned when it is free (released, or expired with its holder
// gone) and its name was last acquired longer ago than the given idle time.
const (
	pgPrune = `
DELETE FROM dlock_locks
WHERE expires_at <= now() AND coalesce(acquired_at, '-infinity') < now() - $1 * interval '1 microsecond'`
	// pgPruneWaiters deletes the expired rows of the waiters' queue (see
	// listener), which a release of the name would otherwise delete.
	pgPruneWaiters = `DELETE FROM dlock_waiters WHERE expires_at <= now()`
	myPrune        = `
DELETE FROM dlock_locks
WHERE expires_at <= UTC_TIMESTAMP(6) AND (acquired_at IS NULL OR acquired_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)`
)

// Prune deletes the rows of names that are free and were last locked more
// than idle ago, and returns how many it deleted. Lock tables of
// per-entity names (invoice:<id>) otherwise grow by a row per name ever
// locked. It is safe for fencing: a name that comes back gets a token from
// the database's clock, larger than any it had, provided that clock does
// not step back. It is also safe to run while the name is in use: a held
// row is never deleted, and an acquire racing the delete inserts the row
// anew. On PostgreSQL it also deletes the waiters' queue rows that
// expired (processes that stopped waiting, for names nobody released
// since), where the queue's table exists. Run it from a periodic job, or
// let a DBA run the same DELETEs. ctx governs the statements; db may use
// any driver (see New).
func Prune(ctx context.Context, db *sql.DB, idle time.Duration) (int64, error) {
	if db == nil {
		return 0, errors.New("tablelock: nil *sql.DB")
	}
	if idle < 0 {
		return 0, fmt.Errorf("tablelock: Prune: negative idle time %v", idle)
	}
	d, err := sqldialect.Of(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("tablelock: %w", err)
	}
	q := pgPrune
	if d == sqldialect.MySQL {
		q = myPrune
	} else if _, err := db.ExecContext(ctx, pgPruneWaiters); err != nil && !missingQueue(err) {
		return 0, fmt.Errorf("tablelock: prune: %w", schemaHint(err))
	}
	res, err := db.ExecContext(ctx, q, micros(idle))
	if err != nil {
		return 0, fmt.Errorf("tablelock: prune: %w", schemaHint(err))
	}
	return res.RowsAffected()
}
