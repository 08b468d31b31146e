// Package dlock is a family of distributed locks for Go applications that
// already run on PostgreSQL or MySQL/MariaDB, with ZooKeeper, Redis and
// etcd backends behind the same interface.
//
// Every backend implements [Locker]. Build one Locker at start-up and
// share it: the goroutines that use it exclude each other. Each Lock is a
// hold of its own, stored on the server under the Locker's owner label and
// a random hold id, so neither another Locker with the same label nor
// anyone who read the holder's id can enter it. Re-entry is bound to the
// call chain: a Lock whose ctx carries a lease of the same name from the
// same Locker ([ContextWithLease]; [Do] hands fn such a ctx) re-enters at
// once with the same fencing token; the name is free again when every
// Lease has been unlocked.
//
// Policy lives here, once: waiting (in the process first, then push
// wake-ups where the server offers them, otherwise capped, jittered
// exponential backoff, and a wake-up at the holder's expiry), hand-offs
// between the call chains of one Locker in one request where the backend
// can ([WithHandOffs]), the renewal
// watchdog (every TTL/3), the client-side monotonic deadline that ends a
// lease whose renewal could not be confirmed in time, whatever the
// backend call is doing, and the clean-up of attempts the caller gave up
// on. A backend supplies single attempts through driver.Backend (package
// driver is the seam, with the implementer's checklist); [Client] turns
// them into a Locker.
//
// Leases are not forever. A lease can end without Unlock (the server expired
// it, the session died, the network failed for longer than the TTL); its
// Done channel is closed, before anyone else can be granted the lock, and
// Err says why. A protected resource that must never accept a write from a
// holder that has lost its lease checks the lease's fencing [Lease.Token]:
// tokens strictly increase across holders.
//
// Per call. [LockWith] and [TryLockWith] (methods of every Client, so
// of every backend's Locker) take options for one call without changing
// the Locker interface: [LockTTL] for this hold's lease, [WaitAtMost] to
// bound the wait, and [WithPayload] for a short text (who holds the lock
// and why) kept with the hold where the backend can, which Inspect, List
// and `dlock ls` show.
//
// Operating it. Every Client reports OpenTelemetry metrics and spans
// (wait and hold durations, acquisitions by outcome, leases lost by
// cause, renewals, waiters and holders; see [WithMeterProvider]), to the
// global providers unless given others, and without lock names unless
// [WithNameTemplate] maps them to a few values. [Client.List] lists the
// locks held under a prefix and [Client.ForceRelease] takes one from a
// stuck holder, where the backend can ([Lister], [ForceReleaser]); the
// dlock command (cmd/dlock) does both, and runs a command under a lock.
package dlock
