// Package redislock is dlock on Redis: a reentrant lock with Redisson's
// semantics (a hash of owner → hold count with PEXPIRE, renewed by a
// watchdog every TTL/3), a fencing token from a counter incremented in the
// same script, waiting by pub/sub instead of polling, and Redlock over
// several independent servers.
//
// Keys share a hash tag, dlock:{name}, so one lock's keys live in one
// Cluster slot. Scripts are embedded Lua run with EVALSHA (EVAL on
// NOSCRIPT).
//
// Contexts. go-redis watches no ctx by default, so dlock hands each of its
// requests to a goroutine it can leave behind when ctx ends. Give New a
// *redis.Client with ContextTimeoutEnabled and go-redis sets each
// command's read and write deadlines from ctx: then the Lock attempts
// and Unlock's release of New and NewFair run on the caller's goroutine,
// each under dlock.CancelMargin at most (a cancelled ctx, which go-redis
// does not watch, still ends a Lock or Unlock within that margin). In
// side-by-side runs, New's uncontended lock and unlock took
// 12–18% less time, and NewFair made 5–13% more acquisitions per second
// with 2 and 8 contending clients (two sets of runs). Redlock, cluster
// and ring clients, and WithReplicas keep the hand-over.
//
// Waiters of one Locker share one pub/sub connection, and so do the
// Lockers, semaphores and latches built on one client (a client whose
// type cannot be compared, such as a wrapper struct holding a slice
// passed by value, cannot be told from a copy, so each of them gets one
// of its own). A Lock that finds
// the lock held marks it (a field of the lock's hash, kept across
// re-entries and hand-offs; the read-write lock's likewise) and lists
// its Locker among the lock's waiters, and the release that frees a
// marked lock wakes one of them, not all: the Locker whose last attempt
// is oldest, by a message on the lock's channel that names it, and the
// lock stays free for that Locker's attempt for 20ms, so a Lock that
// comes meanwhile waits its turn instead of taking it ahead of the
// waiter. A release nobody waited for publishes nothing (a TryLock's
// miss does not mark). A Lock that gives up leaves the list, and passes
// on a wake-up it was sent; so does a Locker woken with none of its
// waiters left. A Locker's entry lapses 2*PushFallback+1s after its
// last attempt, so one that died is passed over (until then, a release
// that picks it leaves the lock free for those 20ms); each waiter also
// tries again every PushFallback and when the holder's TTL runs out, so
// a holder that died never stalls anyone. Lockers of one name should
// run the same dlock release: waiters of an earlier release wake at
// each release of this one that someone waited for; a release of an
// earlier one wakes all of this one's waiters when one of them tried
// during its hold, and otherwise none until they next try (within
// PushFallback).
//
// Servers: Redis 6.2 or later (the scripts draw a token with SET … GET).
//
// When to use the fair lock. Both locks wake one waiting Locker per
// hand-off (about 2 requests per hand-off with 64 waiting Lockers for
// New's, the release and the woken attempt; about 1 for NewFair's, whose
// release grants the lock itself), and goroutines sharing a Locker queue
// in the process and cost the server nothing. New's waiters are served
// about in the order they last tried; use NewFair where the order in
// which they asked must hold (a FIFO queue on the server), or where a
// hand-off must cost no request more than the release. `make bench`
// measures both.
//
// Hand-offs. When a hold of New's lock ends while another goroutine waits
// for the name on the same Locker, one script gives it the lock with a new
// token (dlock.WithHandOffs): no release, publish and acquire. After
// dlock.DefaultHandOffs of them in a row the lock is released as usual,
// so waiters of other processes get their turn. The fair lock hands on
// the same way while no other process is queued on the server; when one
// is, the release grants the lock to it, in the server's order.
//
// Failover. Redis replicates asynchronously: by default a Sentinel or
// Cluster failover can lose the grants and renewals the promoted replica
// had not received. A holder whose grant was lost keeps its lease until
// its next renewal (every TTL/3) finds the hold gone, and a successor can
// be granted on the promoted replica before that: two holders overlap for
// up to TTL/3. Fencing tokens still increase across the failover (a hybrid
// clock, see below), so a resource that checks them refuses the stale
// holder. What a failover cannot lose: a lease whose holder's Done has
// closed stays ended, and no token is repeated.
//
// Failover-safe mode, WithReplicas(n): every grant and renewal is
// followed by WAIT n on the same connection and counts only once n
// replicas have it; a grant they do not acknowledge within TTL/3 is
// refused (ErrNotReplicated) and released, a renewal they do not
// acknowledge leaves the lease's deadline where it was. The promoted
// replica then has every lease its holder was told it has, with an expiry
// no earlier than the holder's deadline, so the lock is never granted
// twice, provided the promoted replica is one that acknowledged: ask for
// as many replicas as a failover may promote from (Sentinel promotes the
// replica with the most data among those it can reach). The cost: one
// replica round trip per grant and renewal, and no grants, nor renewals,
// while fewer than n replicas are connected (holders then lose their
// leases at their deadlines). The fault suite's failover rows measure both
// modes (docs/failover.md).
//
// Restarts. A server that restarts forgets the locks its holders still
// believe they have, whatever it persisted: without persistence it comes
// back empty; from an RDB snapshot (Redis's default) or an AOF fsync'd
// once a second it comes back without the writes since, so with the
// fencing counters of earlier holds but not the current holder's lock.
// The holders learn it at their next renewal, up to a third of a TTL
// later. So until the server process has surely been up for the lease's
// TTL (Redis reports its uptime in whole seconds: up to a second more) it
// grants a name only when this process drew the name's last token
// (tokens are the server's clock in microseconds, so a counter newer than
// the process's start says so): a missing counter, or one restored from
// disk, holds the grant back until then (Redlock's "delayed restart",
// kept by the server itself from its uptime, which starts again with
// every process). An attempt held back fails with dlock.ErrHeldBack
// (beside dlock.ErrNotAcquired), which says how long ago the server
// started and when it grants the name again; Lock waits for that within
// its ctx, and the metrics count it as dlock.outcome held_back. The cost
// is on fresh servers too: the first grant of each name waits until the
// server has surely been up for one TTL, and each grant of a free lock
// reads the server's uptime (INFO server, inside the script). The rule
// assumes every Locker of a name uses one TTL; WithRestartWindow sets the
// window instead, to the longest TTL any Locker of the server uses, so a
// 1 h TTL need not wait an hour. A server that cannot lose an
// acknowledged write holds nothing back: New asks (CONFIG GET, every 10
// s) whether it appends every write and fsyncs it before it answers
// (appendonly yes, appendfsync always); a Cluster, a Ring, Redlock's
// servers, or a server that refuses CONFIG are held back as any other.
// WithReplicas does not lift the hold-back: a restarted master reloads
// its own disk, not its replicas'. A failover promotes a replica that has
// been up all along: there the replicated-write mode, not the uptime,
// keeps the rule (see Failover above).
//
// Tokens are a hybrid clock: a grant takes max(last token + 1, the
// server's clock in microseconds), so a replica holding an older counter,
// or a server that restarted empty, still issues larger tokens, provided
// the servers' clocks do not step back. Redlock narrows the window of a
// single server at the cost of N servers; see NewRedlock for its limits.
package redislock
