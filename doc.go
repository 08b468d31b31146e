// Package dlock is a family of distributed locks for Go applications that
// already run on PostgreSQL or MySQL/MariaDB, with ZooKeeper and Redis
// backends behind the same interface.
//
// Every backend implements [Locker]. A Locker is one owner: locking a name
// it already holds re-enters at once and returns a [Lease] with the same
// fencing token; the name is free again when every Lease has been unlocked.
// Goroutines that must exclude each other use separate Lockers.
//
// Policy lives here, once: waiting (push wake-ups where the server offers
// them, otherwise capped, jittered exponential backoff, and a wake-up at the
// holder's expiry), the renewal watchdog (every TTL/3), and the client-side
// monotonic deadline that ends a lease whose renewal could not be confirmed
// in time. A backend supplies single attempts through [Backend]; [Client]
// turns them into a Locker.
//
// Leases are not forever. A lease can end without Unlock (the server expired
// it, the session died, the network failed for longer than the TTL); its
// Done channel is closed and Err says why. A protected resource that must
// never accept a write from a holder that has lost its lease checks the
// lease's fencing [Lease.Token]: tokens strictly increase across holders.
package dlock
