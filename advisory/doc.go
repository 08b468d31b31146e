// Package advisory locks names with the database's own advisory locks:
// PostgreSQL's pg_advisory_lock family and MySQL/MariaDB's GET_LOCK.
//
// A session advisory lock belongs to a database session, so a Locker pins
// one connection (*sql.Conn) per held name: lock and unlock always run on
// that connection, and it goes back to the pool only after the unlock
// succeeded. Waiting happens in the server's own lock queue (no polling).
// Lock goes straight into it, so that a waiter learns of the grant, and its
// token, in the round trip that waited: on MySQL through the
// dlock_wait_lock procedure (migration 000005), which waits and draws the
// token in one call; on PostgreSQL when the driver is pgx, which tells the
// session's id for free. (Without these, Lock makes one attempt first, and
// on MySQL the token takes a statement after the grant.) Cancelling a
// waiting Lock ends its session on the server (pg_terminate_backend, KILL
// CONNECTION) and discards the connection, so a lock granted at the last
// moment dies with the session instead of leaking; Lock returns once the
// server lists the session no more, so the lock is free to others by then.
// (Cancelling only the
// statement would miss a wait that had not started yet: it would go on
// waiting.) When the server does not confirm that end within three
// quarters of dlock.CancelMargin (a server or link gone silent), the
// connection is given up, and the server ends the session when it
// notices. With pgx's stdlib and go-sql-driver/mysql, whose statements
// end when their ctx does, a Lock's attempts and wait and an Unlock's
// release run on the caller's goroutine; with any other driver on one
// of the Locker's, so that the call still returns by its ctx. When a hold ends while another goroutine waits
// on the same Locker, the session keeps the server's lock and passes it to
// that goroutine, with a new token, in one statement (up to
// dlock.WithHandOffs times in a row; then it unlocks as usual).
//
// Expiry is on the server's clock: while a lock is held its session's idle
// timeout is the lease's TTL (PostgreSQL 14+ idle_session_timeout, MySQL
// wait_timeout, in whole seconds), and the watchdog pings the connection
// every TTL/3. A holder that stops (crash, pause, WithoutAutoRenew) has its
// session ended by the server after the TTL, which releases the lock; a
// failed ping ends the lease with dlock.ErrLost at once, since the lock
// went with the session. A TTL may be at most MaxTTL, about 24.8 days:
// no longer idle timeout is kept by every server.
//
// Fencing tokens come from the database in the acquiring statement. On
// PostgreSQL a token is the server's clock in microseconds when the lock
// was granted: no write, nothing that a crash or a promoted standby can
// lose, and strictly increasing across the holders of a name as long as
// the clock does not step back (a hold is granted only after the last one
// ended). On MySQL it is a hybrid clock, max(last + 1, the server's clock
// in µs read after the grant), kept in the holder's row (dlock_fences,
// created by package migrations; the dlock_fence sequence of older
// versions is no longer used) while the lock is held: Unlock deletes the
// row with the lock (MySQL migration 000009), so a name leaves nothing
// behind once unlocked, and the next holder's token comes from the clock,
// read after its grant and so after the last holder's token was drawn.
// Only a session that ends without unlocking (a crash) leaves its row,
// which the name's next hold overwrites and Prune deletes. Where the
// server writes no binary log, the rows are in a MEMORY table, so taking
// a lock waits for no redo log flush: a restart empties the table, and
// then the clock alone keeps the tokens increasing. Where it writes one (log_bin: on by default in MySQL
// 8, off in MariaDB), which any server with replicas does, they are in
// InnoDB: a replica that restarts would lose a MEMORY table's rows, and
// the primary's next write to one of them would stop its replication
// (error 1032). MySQL migrations 000006 and 000007 choose the engine; a
// DBA who turns the binary log on later runs CALL dlock_fences_engine(),
// and a Locker warns until then. With a binary log, each acquire's write is logged too, and
// with sync_binlog = 1 (MySQL 8's default) it waits for the binary log's
// sync as well as the redo log's flush (BenchmarkBinlog measures both).
// Only a user with SUPER or BINLOG ADMIN may keep a session's writes out
// of the binary log (sql_log_bin), so nothing a Locker sets avoids it.
//
// Inspect. On MySQL the holder's owner id and token are in its
// dlock_fences row, whole. On PostgreSQL the holding session carries them
// in its application_name, which the server keeps to 63 bytes of
// printable ASCII: the token and the hold id (the part of the owner id
// after its last '#') come whole, and of the owner label as much as fits
// after them, about 23 bytes, with each byte that is not printable ASCII
// shown as '?'. So compare holders by token or hold id there, not by the
// whole owner id.
//
// Failover. Advisory locks live in the server's memory with their
// sessions: they are not replicated, and a failover (or a restart) ends
// every one. A holder learns at its next ping (every TTL/3), while a
// waiter reconnecting to the promoted server can be granted at once, so
// holders and successors can overlap for up to TTL/3; tokens stay in
// order (PostgreSQL's clock; MySQL's hybrid counter), and a fenced
// resource refuses the stale holder. There is no failover-safe mode: use
// tablelock with a synchronous standby where a failover must not grant a
// lock twice. The fault suite measures the overlaps (docs/failover.md).
//
// Names: PostgreSQL keys are PostgresKey(name), a 64-bit FNV-1a hash.
// Two names with the same key share one lock: exclusion still holds, one
// waits for the other needlessly; with 64 bits the chance for a million
// names is about 3·10⁻⁸. MySQL lock names are at most 64 characters and
// compared case-insensitively, so MySQLName(name) keeps short lower-case
// names readable and hashes everything else (SHA-256).
//
// Pools: each held lock, and each Lock waiting in the server's queue,
// takes one connection out of db's pool. On MySQL a released session
// stays with the Locker for up to 100 ms, its idle timeout still set, so
// that the next hold takes it without setting the timeout again and the
// release need not restore it (a lock and unlock cost two statements, as
// bare GET_LOCK and RELEASE_LOCK do); it then goes back with the server's
// timeout restored. The Locker keeps at most two such sessions, never the
// last free connection of a bounded pool, and Close gives them back. Lock waits for a free connection
// as long as its ctx allows; TryLock fails at once with ErrPoolExhausted
// when every connection of a bounded pool is in use. Give the Locker a
// *sql.DB of its own when the holder's work also needs connections: on a
// shared bounded pool, waiters can take every connection and the holder
// can then never finish (the seckill tests show it).
//
// Poolers: session locks need a server session that stays with the
// client: PgBouncer in session mode works, transaction or statement mode
// does not (the lock would stay with a server connection other clients
// then use). Use Locker.TryLockTx/LockTx, the transaction-scoped
// pg_advisory_xact_lock, behind a transaction-mode pooler.
package advisory
