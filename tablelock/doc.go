// Package tablelock is a lock table in PostgreSQL or MySQL/MariaDB: one row
// per lock name in dlock_locks (created by package migrations) with the
// owner, a re-entry count, a fencing token and an expiry on the database's
// clock.
//
// Acquire, re-entry and take-over of an expired row are one atomic
// statement, so the lock needs no transaction held open: it survives any
// connection pool, and a holder that dies releases the lock when its lease
// expires. Rows are kept after release so the token only ever grows.
//
// Waiting is pushed on PostgreSQL (LISTEN/NOTIFY on one listener connection
// per *sql.DB, shared by the waiters of every Locker on it) and polled with capped, jittered
// backoff on MySQL. Either way a waiter also wakes when the holder's lease
// runs out.
//
// Each hold is its own owner on the server: the owner column holds the
// Locker's label (dlock.WithOwner), '#' and a random hold id, so neither a
// Locker with the same label nor one built from what the row shows can
// enter it. Re-entry happens in the process (see dlock.ContextWithLease).
//
// Tokens are a hybrid clock: a new holder gets the larger of the last
// token + 1 and the database's clock in microseconds. Rows of names no
// longer used can therefore be deleted (Prune) without a returning name
// ever getting a smaller token, provided the database's clock does not step
// back.
//
// Every lock operation is one short statement on a pooled connection. Size
// the pool for the concurrency you expect (db.SetMaxIdleConns): with
// database/sql's default of 2 idle connections, contended locking on
// PostgreSQL spends most of its time starting server processes.
package tablelock
