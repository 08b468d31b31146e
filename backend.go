package dlock

import (
	"context"
	"time"
)

// Request is one attempt by Owner to take Name for TTL.
type Request struct {
	Name  string
	Owner string
	TTL   time.Duration
	// Wait is true for Lock's attempts, which will wait and try again, and
	// false for TryLock's. Fair backends queue only waiting attempts.
	Wait bool
}

// Grant is the outcome of one acquire attempt.
type Grant struct {
	// Acquired reports whether Owner now holds the lock.
	Acquired bool
	// Token is the fencing token of the hold, when Acquired.
	Token uint64
	// Handle is backend state for the hold (a pinned connection, a node
	// path); it comes back in Hold.
	Handle any
	// Lost, when not nil, delivers the reason if the server ends the hold
	// on its own (a session expiry), so the lease ends at once.
	Lost <-chan error
	// RetryAfter is, when not Acquired, the holder's remaining lease by the
	// server's clock: a waiter tries again then at the latest. Zero when
	// unknown.
	RetryAfter time.Duration
}

// Hold identifies a held lock to its backend.
type Hold struct {
	Name   string
	Owner  string
	Token  uint64
	TTL    time.Duration
	Handle any
}

// Backend is what a lock server supplies: single attempts, no policy.
// Client adds waiting, re-entry, renewal and loss signalling.
//
// Backends must leave nothing behind on a failed call: an Acquire whose
// outcome is unknown (its reply was lost) must either resolve it or leave
// at most a hold that expires by itself.
type Backend interface {
	// Acquire makes one attempt. It must not wait for another owner. An
	// owner that already holds the lock on the server re-enters it and gets
	// its current token.
	Acquire(ctx context.Context, r Request) (Grant, error)
	// Refresh extends h by h.TTL on the server's clock. It returns an
	// error wrapping ErrNotHeld when h is no longer held.
	Refresh(ctx context.Context, h Hold) error
	// Release gives h up. It returns an error wrapping ErrNotHeld when h
	// was no longer held, and another error only when h may still be held
	// on the server: Client then retries the release in the background.
	Release(ctx context.Context, h Hold) error
}

// Notifier is implemented by backends whose server can push a wake-up when
// a lock may have become free (pub/sub, LISTEN/NOTIFY, watches).
type Notifier interface {
	// Subscribe asks for wake-ups on name: the channel receives (it is
	// buffered, sends never block) each time name may have become free.
	// Subscribe returns once wake-ups are guaranteed for every release that
	// happens after it, so a waiter subscribes before its first attempt.
	// cancel ends the subscription. ctx governs the setup only.
	Subscribe(ctx context.Context, name string) (wake <-chan struct{}, cancel func(), err error)
}

// Leaver is implemented by backends that keep waiters in a queue on the
// server (fair locks): Client calls Leave when a waiting Lock gives up, so
// the queue does not wait for the waiter's timeout.
type Leaver interface {
	// Leave removes r's waiter from the queue. It is best effort: a
	// waiter that is not removed leaves when its queue entry times out.
	Leave(ctx context.Context, r Request) error
}

// Blocker is implemented by backends whose server queues waiters itself
// (advisory locks). Client's Lock then calls AcquireWait instead of polling.
type Blocker interface {
	// AcquireWait waits on the server until the lock is held or ctx ends.
	AcquireWait(ctx context.Context, r Request) (Grant, error)
}
