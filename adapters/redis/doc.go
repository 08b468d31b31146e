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
// Waiters of one Locker share one pub/sub connection. A release publishes
// on the lock's channel; each waiter also wakes when the holder's TTL runs
// out, so a holder that died never stalls anyone.
//
// What Redis promises: a single server, or a primary with replicas, can
// lose a lock on failover (replication is asynchronous), so two owners may
// briefly hold it. The lease's watchdog notices (the next renewal finds
// the lock gone, Done closes with dlock.ErrLost), and the fencing token
// lets the protected resource refuse the stale holder. Redlock narrows the
// window at the cost of N servers; see NewRedlock for its limits.
package redislock
