package dlock

import (
	"context"
	"errors"
)

// ErrUnknownPermit is returned by Permit.Release and Permit.Refresh when the
// permit is no longer held: released already, expired, or gone with its
// session.
var ErrUnknownPermit = errors.New("dlock: unknown or expired permit")

// Semaphore limits how many holders use a resource at once: at most its
// capacity in permits are out at any time. The Redis and ZooKeeper
// semaphores implement it; dlocktest.RunSemaphore is its conformance
// suite.
type Semaphore interface {
	// TryAcquire takes n permits if they are free now, and fails with an
	// error wrapping ErrNotAcquired if not. n must be between 1 and the
	// capacity (an error before any I/O otherwise).
	TryAcquire(ctx context.Context, n int) (Permit, error)
	// Acquire takes n permits, waiting until they are free. A wait that
	// ctx ends fails with ErrNotAcquired joined with ctx's error, and
	// leaves nothing taken.
	Acquire(ctx context.Context, n int) (Permit, error)
}

// Permit is permits taken together from a Semaphore, held until Release
// (or until they expire or their session ends, as the semaphore's
// package documents).
type Permit interface {
	// ID names the permit on the server.
	ID() string
	// N is how many permits it holds.
	N() int
	// Token is its fencing token: it strictly increases across the
	// permits of one semaphore.
	Token() uint64
	// Refresh confirms the permit is still held (and extends it where
	// permits expire); an error wrapping ErrUnknownPermit says it is not.
	Refresh(ctx context.Context) error
	// Release gives the permits back; an error wrapping ErrUnknownPermit
	// says they were not held any longer.
	Release(ctx context.Context) error
}
