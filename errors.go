package dlock

import "errors"

var (
	// ErrNotAcquired is returned by TryLock when another owner holds the
	// name, and by Lock when its ctx ended before the name was free; in the
	// second case it is joined with ctx.Err().
	ErrNotAcquired = errors.New("dlock: lock not acquired")

	// ErrHeldBack is wrapped, beside ErrNotAcquired, by TryLock, and by
	// a Lock whose ctx ended, when the server turned the attempt away not
	// for a holder but because it restarted lately and may have lost a
	// hold whose holder still believes it has it (Redlock's delayed
	// restart, see package redislock): the error says how long ago the
	// server started and when it grants again. Lock waits for that.
	ErrHeldBack = errors.New("dlock: grants held back after a server restart")

	// ErrNotHeld is returned by Lease.Unlock and Lease.Refresh when the
	// lease is no longer held by its owner: it was already unlocked, it
	// expired, or the server gave it to another owner.
	ErrNotHeld = errors.New("dlock: lock not held")

	// ErrLost is wrapped by Lease.Err when a lease ended without Unlock: the
	// renewal could not be confirmed before the lease's deadline (or, with
	// WithoutAutoRenew, Refresh was not called in time), the server
	// reported the lock gone, or the session that held it ended. The cause
	// is wrapped beside it.
	ErrLost = errors.New("dlock: lease lost")

	// ErrUnlocked is returned by Lease.Err after the lease's own Unlock.
	ErrUnlocked = errors.New("dlock: lease unlocked")

	// ErrInvalidName is returned, before any I/O, by every call given a name
	// that is empty, longer than MaxNameLen bytes, not valid UTF-8, or
	// contains NUL.
	ErrInvalidName = errors.New("dlock: invalid lock name")

	// ErrClosed is returned by calls on a Locker after Close, and wrapped by
	// Lease.Err for leases that Close ended.
	ErrClosed = errors.New("dlock: locker closed")
)
