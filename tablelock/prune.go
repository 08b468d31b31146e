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
// gone) and its name was last acquired longer ago than the given idle
// time. Each statement deletes one batch, oldest first along the
// acquired_at index (migrations: MySQL 000008, PostgreSQL 000006), in a
// transaction of its own.
const (
	pgPruneBatch = `
DELETE FROM dlock_locks WHERE name IN (
	SELECT name FROM dlock_locks
	WHERE (acquired_at < now() - $1 * interval '1 microsecond' OR acquired_at IS NULL) AND expires_at <= now()
	ORDER BY acquired_at NULLS FIRST
	LIMIT $2
	FOR UPDATE SKIP LOCKED)`
	// pgPruneWaiters deletes the expired rows of the waiters' queue (see
	// listener), which a release of the name would otherwise delete.
	pgPruneWaiters = `DELETE FROM dlock_waiters WHERE expires_at <= now()`
	myPruneBatch   = `
DELETE FROM dlock_locks
WHERE (acquired_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND OR acquired_at IS NULL) AND expires_at <= UTC_TIMESTAMP(6)
ORDER BY acquired_at
LIMIT ?`
)

// PruneBatch is how many rows one statement of Prune deletes: each batch
// is a short transaction, so no renewal or grant waits on its row locks
// for more than moments.
const PruneBatch = 1000

// MinPruneIdle is the shortest idle time Prune uses, whatever it is
// given: a row is deleted only when its name was last acquired at least
// that long ago. An acquire statement reads the database's clock for its
// token when it starts; one that started before a name's last grant and
// ran on past that holder's release and the row's deletion would
// re-create the row with a smaller token. No statement runs that long
// (InnoDB's lock wait timeout is 50s by default).
const MinPruneIdle = time.Minute

// Prune deletes the rows of names that are free and were last locked more
// than idle ago (MinPruneIdle at least), and returns how many it deleted.
// Lock tables of per-entity names (invoice:<id>) otherwise grow by a row
// per name ever locked. It deletes in batches of PruneBatch rows, oldest
// first, each in a transaction of its own at READ COMMITTED, skipping
// (PostgreSQL) rows an acquire has locked, so holders renewing meanwhile
// do not wait on it; on a table of a million free rows it takes as many
// batches as that needs, and ctx can stop it between two. It is safe for
// fencing: a name that comes back gets a token from the database's clock,
// larger than any it had, provided that clock does not step back (see
// MinPruneIdle). It is also safe to run while the name is in use: a held
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
	idle = max(idle, MinPruneIdle)
	d, err := sqldialect.Of(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("tablelock: %w", err)
	}
	if err := checkSchema(ctx, db, d); err != nil {
		return 0, err
	}
	q := pgPruneBatch
	if d == sqldialect.MySQL {
		q = myPruneBatch
	} else if _, err := db.ExecContext(ctx, pgPruneWaiters); err != nil {
		return 0, fmt.Errorf("tablelock: prune: %w", err)
	}
	var deleted int64
	for retry := 0; ; {
		n, err := pruneBatch(ctx, db, q, idle)
		deleted += n
		if sqldialect.Deadlock(err) && retry < deadlockRetries {
			retry++ // the batch was rolled back whole: run it again
			continue
		}
		if err != nil {
			return deleted, fmt.Errorf("tablelock: prune: %w", schemaHint(err))
		}
		if n < PruneBatch {
			return deleted, nil
		}
	}
}

// pruneBatch deletes one batch in a transaction of its own at READ
// COMMITTED: InnoDB then keeps no locks on the rows it read and did not
// delete (a long hold among the oldest rows), and no gap locks.
func pruneBatch(ctx context.Context, db *sql.DB, q string, idle time.Duration) (int64, error) {
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, q, micros(idle), PruneBatch)
	if err != nil {
		return 0, errors.Join(err, tx.Rollback())
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, errors.Join(err, tx.Rollback())
	}
	return n, tx.Commit()
}
