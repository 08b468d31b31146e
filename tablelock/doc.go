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
// Owners are stored on the server: two Lockers made with the same
// dlock.WithOwner are one owner, and each holds the lock once in the row's
// re-entry count.
//
// Every lock operation is one short statement on a pooled connection. Size
// the pool for the concurrency you expect (db.SetMaxIdleConns): with
// database/sql's default of 2 idle connections, contended locking on
// PostgreSQL spends most of its time starting server processes.
package tablelock
