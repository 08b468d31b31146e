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
// Waiting is pushed on PostgreSQL. MySQL offers no push, so its waiters
// poll, one per process: the waiters of every Locker on one *sql.DB wait
// for a name in one queue in the process, and one poll per name wakes
// the longest waiting of them to make an attempt, paced by that waiter's
// Locker's Backoff (capped and jittered by default). A release by any
// Locker on the *sql.DB wakes that waiter at once; a release by another
// process, or a lease that ran out, is found by the next poll. The other
// waiters make an attempt of their own only every PushFallback. A
// hand-off therefore costs about two statements in a process however
// many of its Lockers wait, and across processes what their polls send
// while the lock is held: with 64 waiting Lockers and 10 ms holds, 2.1
// requests per hand-off in one process, 2.9 to 3.2 spread over 16
// (BenchmarkHerd), and 5.1 to 5.5 over 64, one each: every process
// polls while the lock is held. Where many processes wait for one name
// on MySQL, package advisory queues them in the server instead.
//
// On PostgreSQL, each *sql.DB is one waiting process: one LISTEN
// connection, shared by the waiters of every Locker on it. Waiting
// processes queue in dlock_waiters (an unlogged table), each under the
// owner and TTL of its waiter's last attempt. The LISTEN connection is
// up while any waiter of the process waits, and until the process's
// place in the queue has lapsed after the last one (2*PushFallback + 2s,
// 6 seconds by default); then it goes back to the pool. While it is up, a
// waiter's first attempt queues the process; otherwise the first one
// only tries, and the one after LISTEN queues. A listening process costs
// every NOTIFY in the database a signal on PostgreSQL before 19, whatever
// the channel, which is why an idle one stops. A release grants the lock,
// in the same statement, to that waiter of the process that has waited
// longest and is still connected: the next token, an expiry one TTL
// ahead (or sooner, when the process's place in the queue would lapse
// sooner: a frozen process blocks the lock no longer than its place
// would), and a notification on a channel only that process listens on.
// The waiter holds the lock without a statement of its own, and counts
// its lease from its own last attempt, which the server saw before the
// grant, so the lease ends before the server's expiry. A hand-off
// therefore costs the release alone, however many processes wait
// (BenchmarkHerd). A waiter
// that gives up leaves the queue before its Lock returns (or, on a
// server too slow to answer within dlock.CancelMargin, just after, in
// the background), and gives back a grant made to it meanwhile; a grant
// whose notification was lost is
// taken by the waiter's next attempt. A process whose waiter is not known
// (one of a version before the grant, or one whose waiter left) is woken
// instead and tries itself; one that stopped waiting passes the wake-up
// on. One that died is skipped. When the queue is empty (after a failover
// or a crash, which empty an unlogged table), a release wakes one waiter
// in every process. Finding the head and its grant's term is most of a
// release's work on the server, so a hold whose acquire saw nobody else
// queued is released by a short statement while that is still so; when
// a process has queued since, that statement changes nothing and the
// queue's release follows (one statement more, once per hold). Processes
// running a version of this package from before the queue do not join
// it: they wake at their fallback poll (dlock.Config.PushFallback) while
// newer processes wait too.
//
// The schema. A Locker's statements are written for the schema of this
// version's migrations and no older one: its first call that reaches the
// database checks, in one query, that the tables and columns are there,
// and returns ErrSchema, naming the migration that is missing, until they
// are. Migrations only add, so instances of an earlier version keep
// working on a database migrated for a later one, and a fleet upgrades by
// migrating first.
//
// Goroutines sharing a Locker queue in the process, and when a hold ends
// while one of them waits, one UPDATE hands the row to it: a new owner, the
// next token and a new expiry. That replaces a release and an acquire.
// The row is released as usual instead when
// another process waits for it (PostgreSQL: it is in dlock_waiters; MySQL:
// a waiter's attempt stamped waited_at in the last second; not the
// Locker's own attempts, made while it waited for the
// lock: a stamp older than its last one may be its own and is passed
// over, and a waiter of another process hidden behind it is seen when it
// stamps again, within half a second), and after dlock.DefaultHandOffs
// hand-offs in a row (dlock.WithHandOffs).
//
// Commits and their WAL flush, on PostgreSQL. An acquire and a renewal
// wait for their commit's flush (and a synchronous standby's). A release
// does not: one that grants nothing, lost, only keeps the lock with its
// holder, who let it go, until the expiry; and one that grants the lock
// to the head of the queue grants only a term that ends no later than
// the hold it replaces. A grant lost with its commit leaves the last
// flushed hold in place, and that hold lasts at least as long, so the
// lost grant's holder, whose lease ends before its grant's expiry, has
// let go before anyone else can take the lock. The term is cut to what
// the replaced hold has left when that is at least half the term asked
// for (a holder's renewal restores the full TTL); otherwise the release
// grants nothing and wakes the head, whose own attempt takes the lock and
// waits for its flush. A hand-off between goroutines follows the same
// rule, and when it cannot cut the term it waits for the flush: the
// Client hands the lease on only once it knows the outcome. With
// dlock.WithoutAutoRenew a cut grant is renewed once on arrival, as Lock
// does for any shorter first term. The hybrid clock keeps tokens in order
// past a lost grant. (MySQL and MariaDB set the flush for the whole
// server only: innodb_flush_log_at_trx_commit.)
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
// back. Lockers do it themselves: after a release, at most every tenth of
// the prune idle time, one deletes in the background the free rows of
// names not locked for that long (WithPruneIdle, a day by default), so the
// table holds the names used within a day, not every name ever locked.
//
// Failover. A lock is a committed row, so it is as durable as the
// database's commits, and a failover loses what the promoted server had
// not received. With asynchronous replication (the default for a
// PostgreSQL streaming standby and for a MariaDB/MySQL replica) a
// failover can lose recent grants and renewals: a holder whose grant was
// lost keeps its lease until its next renewal (every TTL/3) finds the row
// gone or taken, and a successor can be granted before that. Tokens stay
// in order across it (the hybrid clock above), so a fenced resource
// refuses the stale holder. With a synchronous standby on PostgreSQL
// (synchronous_standby_names naming it, synchronous_commit on, the
// default) an acquire or renewal returns only once the standby has
// flushed it, so a promoted standby has every lease a holder was told it
// has, with its expiry, or, for a grant by a release or a hand-off that
// did not wait (above), an earlier hold that lasts at least as long: the
// lock is never granted twice. While the standby is away, acquires,
// renewals and the hand-offs that wait for their flush wait for it
// (holders lose their leases at their deadlines) unless the primary is
// told to stop waiting. The fault
// suite measures both (docs/failover.md). MariaDB's semi-synchronous replication
// (rpl_semi_sync_master_wait_point = AFTER_SYNC) is the analogue there;
// it is not tested here.
//
// Every lock operation is one short statement on a pooled connection. Size
// the pool for the concurrency you expect (db.SetMaxIdleConns): with
// database/sql's default of 2 idle connections, contended locking on
// PostgreSQL spends most of its time starting server processes.
package tablelock
