package dlock

import (
	"context"
	"errors"
	"time"

	"github.com/dlockhq/dlock/internal/errjoin"
)

// Locker is a lock client. One Locker is meant to be shared by every
// goroutine of a process, and they exclude each other: each Lock is a hold
// of its own, unless its ctx carries a lease of the same name from the same
// Locker (ContextWithLease; Do's fn gets such a ctx), which it re-enters.
type Locker interface {
	// Lock blocks until the caller holds name, or ctx ends. ctx governs
	// the wait and every request made while waiting; a ctx that has
	// already ended fails before any I/O. When ctx ends the error wraps
	// both ErrNotAcquired and ctx.Err(), and nothing is left held on the
	// caller's behalf: an attempt whose reply had not come back is given
	// back in the background once its outcome is known. Locking a name
	// that ctx's call chain holds through this Locker re-enters at once.
	Lock(ctx context.Context, name string) (Lease, error)
	// TryLock makes one attempt and never waits for another owner: it
	// returns ErrNotAcquired when the name is held by someone else,
	// including another goroutine of this process. ctx governs the
	// attempt's requests.
	TryLock(ctx context.Context, name string) (Lease, error)
}

// Lease is one successful Lock or TryLock. It is safe for concurrent use.
type Lease interface {
	// Name is the lock's name.
	Name() string
	// Owner is the hold's owner id on the server: the Locker's owner label
	// (WithOwner), '#' and a random hold id. Knowing it does not let
	// anyone else enter the hold.
	Owner() string
	// Token is the fencing token: it strictly increases, per name, across
	// successive holders, and is the same for re-entries of one hold.
	Token() uint64
	// Deadline is when the lease ends unless it is renewed first, on the
	// local monotonic clock, before the server-side expiry; the zero time
	// once the lease has ended.
	Deadline() time.Time
	// Done is closed when the lease ends for any reason: Unlock, loss, or
	// Close of its Locker. It closes at the lease's deadline at the
	// latest, whatever a request to the server is doing then.
	Done() <-chan struct{}
	// Err is nil while the lease is held. Afterwards it says why it ended:
	// ErrUnlocked, an error wrapping ErrLost and its cause, or ErrClosed.
	Err() error
	// Refresh extends the lease by its TTL from now, as the watchdog does.
	// It is needed only with WithoutAutoRenew. It returns an error wrapping
	// ErrNotHeld when the lease has ended. ctx governs the request.
	Refresh(ctx context.Context) error
	// Unlock ends this lease at once (Done closes). When it was the last
	// lease of its hold the lock is released on the server. It returns an
	// error wrapping ErrNotHeld only when the lease had already ended
	// (unlocked twice, lost, or expired on the server before the release).
	// The release request is never cancelled midway, which would leave its
	// outcome unknown: ctx bounds how long Unlock waits for it. When ctx
	// ends first (or had already ended), Unlock returns an error wrapping
	// ctx.Err() and the release goes on in the background, bounded by
	// DefaultReleaseTimeout. A release that fails without the server saying
	// the lock is gone is retried in the background until it succeeds, the
	// lock has expired on the server, or, for locks that end with a
	// session, the session has ended; Unlock's error then says so.
	Unlock(ctx context.Context) error
}

// Holder describes who holds a lock, as the server sees it.
type Holder struct {
	// Owner is the holder's owner id.
	Owner string
	// Token is the holder's fencing token.
	Token uint64
	// TTL is the time left on the holder's lease by the server's clock; 0
	// when the backend's locks do not expire on their own (they end with
	// the holder's session).
	TTL time.Duration
	// Payload is the text the holder's Lock stored with the hold
	// (WithPayload); "" for none.
	Payload string
	// Age is how long the holder has held the lock, since its grant: by
	// the server's clock where the server keeps the time of the grant
	// (the lock table, Redis), by the server's wall clock against the
	// reader's (ZooKeeper), and 0 where the backend does not know (etcd,
	// advisory locks).
	Age time.Duration
	// HeldBack, when nobody holds the name, is how long a server that
	// restarted lately still holds its grants back (ErrHeldBack); 0
	// otherwise, and where the backend never holds grants back.
	HeldBack time.Duration
}

// Inspector is implemented by backends that can see a lock's holder.
type Inspector interface {
	// Inspect reports who holds name; ok is false when nobody does. ctx
	// governs the request.
	Inspect(ctx context.Context, name string) (h Holder, ok bool, err error)
}

// Lister is implemented by backends that can list the locks held under a
// name prefix: what an operator's `dlock ls` and a dashboard show.
type Lister interface {
	// List reports the locks held whose names start with prefix, in name
	// order, at most limit of them. ctx governs the requests.
	List(ctx context.Context, prefix string, limit int) ([]Held, error)
}

// ForceReleaser is implemented by backends that can take a lock away
// from its holder: an operator's last resort for a holder that is stuck
// but still renewing (`dlock release`). The evicted holder learns it at
// its next renewal (its lease ends with ErrNotHeld), not before: a
// successor may be granted while its Done is still open, so this breaks
// the lease rule on purpose, and only the fencing token protects the
// resource from the evicted holder's late writes (every later grant's
// token is larger than its).
type ForceReleaser interface {
	// ForceRelease frees name whoever holds it, and reports the holder it
	// evicted; ok is false when nobody held it. ctx governs the requests.
	ForceRelease(ctx context.Context, name string) (evicted Holder, ok bool, err error)
}

// Held is a held lock as List reports it.
type Held struct {
	Name string
	Holder
	// Waiters is how many wait for the lock, as the backend counts them:
	// processes queued on PostgreSQL's lock table, Lockers queued on
	// Redis, queue nodes or keys behind the holder on ZooKeeper and etcd.
	// UnknownWaiters where the backend does not know.
	Waiters int
}

// UnknownWaiters is Held.Waiters when the backend cannot count them.
const UnknownWaiters = -1

// DefaultListLimit is how many held locks Client.List reports when
// given no limit.
const DefaultListLimit = 1000

// Identifier is implemented by Lockers that can name the lock service they
// talk to the same way in every process (a server address, a root path).
// Client implements it from its backend's own Identity method, or the
// backend's type.
type Identifier interface {
	// Identity names the lock service, the same in every process.
	Identity() string
}

// Do runs fn while holding name: it locks (waiting as Lock does), calls fn
// with the lease and a context that carries it (so fn's own Locks of name
// on l re-enter) and is cancelled, with the loss as its cause, if the
// lease is lost, and unlocks when fn returns or panics (then the panic
// goes on). Use lease.Token() to fence fn's writes. If the lease was lost
// while fn ran, Do's error wraps ErrLost even when fn returned nil: fn's
// effects were not protected the whole time. ctx governs the wait and
// fn's context; the release runs even when ctx has ended, bounded by
// DefaultReleaseTimeout.
func Do(ctx context.Context, l Locker, name string, fn func(ctx context.Context, lease Lease) error) error {
	return do(ctx, l, name, fn, Locker.Lock)
}

// TryDo is Do with TryLock: it fails with ErrNotAcquired at once, without
// calling fn, when another owner holds name.
func TryDo(ctx context.Context, l Locker, name string, fn func(ctx context.Context, lease Lease) error) error {
	return do(ctx, l, name, fn, Locker.TryLock)
}

func do(ctx context.Context, l Locker, name string, fn func(context.Context, Lease) error,
	lock func(Locker, context.Context, string) (Lease, error)) (err error) {
	switch {
	case ctx == nil:
		return errors.New("dlock: Do: nil Context")
	case l == nil:
		return errors.New("dlock: Do: nil Locker")
	case fn == nil:
		return errors.New("dlock: Do: nil fn")
	}
	lease, err := lock(l, ctx, name)
	if err != nil {
		return err
	}
	workCtx, cancel := LeaseContext(ctx, lease)
	defer func() {
		cancel(nil)
		if lostErr := lease.Err(); lostErr != nil && !errors.Is(lostErr, ErrUnlocked) {
			if !errors.Is(err, lostErr) { // fn's error may be the loss already (its ctx's cause)
				err = errjoin.Join(err, lostErr)
			}
			return
		}
		unlockCtx, cancelUnlock := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
		defer cancelUnlock()
		err = errjoin.Join(err, lease.Unlock(unlockCtx))
	}()
	return fn(workCtx, lease)
}

// LeaseContext returns a copy of ctx that carries lease (as
// ContextWithLease does) and is cancelled when the lease ends, with its
// Err as the cause, or when cancel is called. It is the context Do hands
// its fn, for code that holds a lease in other ways (an election's
// leader, a scheduled job's run). Call cancel when the work is done.
func LeaseContext(ctx context.Context, lease Lease) (context.Context, context.CancelCauseFunc) {
	work, cancel := context.WithCancelCause(ContextWithLease(ctx, lease))
	if l := ownLease(lease); l != nil {
		// Cancelled as the lease ends, before its hold can be released:
		// no other owner is granted the lock while the work's ctx is live.
		stop := l.h.st.cancelsWith(l, cancel)
		return work, func(cause error) {
			stop()
			cancel(cause)
		}
	}
	stop := context.AfterFunc(leaseContext{lease}, func() { cancel(lease.Err()) })
	return work, func(cause error) {
		stop()
		cancel(cause)
	}
}

// ownLease is l as this package's lease, or nil for another Lease.
func ownLease(l Lease) *lease {
	own, _ := l.(*lease)
	return own
}

// leaseContext is a context that is done when its lease ends, for
// context.AfterFunc.
type leaseContext struct{ lease Lease }

func (leaseContext) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c leaseContext) Done() <-chan struct{}     { return c.lease.Done() }
func (c leaseContext) Err() error                { return errFromDone(c.lease.Done()) }
func (leaseContext) Value(any) any               { return nil }

func errFromDone(done <-chan struct{}) error {
	select {
	case <-done:
		return context.Canceled
	default:
		return nil
	}
}
