package dlock

import (
	"context"
	"errors"
	"time"
)

// Locker is a lock client for one owner.
type Locker interface {
	// Lock blocks until this Locker's owner holds name, or ctx ends. ctx
	// governs the wait and every request made while waiting; when it ends
	// the error wraps both ErrNotAcquired and ctx.Err(), and no lock taken
	// on the caller's behalf is left behind. Locking a name the owner already
	// holds re-enters at once.
	Lock(ctx context.Context, name string) (Lease, error)
	// TryLock makes one attempt and never waits for another owner: it
	// returns ErrNotAcquired when the name is held by someone else. ctx
	// governs the attempt's requests.
	TryLock(ctx context.Context, name string) (Lease, error)
}

// Lease is one successful Lock or TryLock. It is safe for concurrent use.
type Lease interface {
	// Name is the lock's name.
	Name() string
	// Owner is the owner id that holds the lock.
	Owner() string
	// Token is the fencing token: it strictly increases, per name, across
	// successive holders, and is the same for re-entries of one hold.
	Token() uint64
	// Done is closed when the lease ends for any reason: Unlock, loss, or
	// Close of its Locker.
	Done() <-chan struct{}
	// Err is nil while the lease is held. Afterwards it says why it ended:
	// ErrUnlocked, an error wrapping ErrLost and its cause, or ErrClosed.
	Err() error
	// Refresh extends the lease by its TTL from now, as the watchdog does.
	// It is needed only with WithoutAutoRenew. It returns an error wrapping
	// ErrNotHeld when the lease has ended. ctx governs the request.
	Refresh(ctx context.Context) error
	// Unlock ends this lease. When it was the last lease of its owner's hold
	// the lock is released on the server. It returns an error wrapping
	// ErrNotHeld when the lease had already ended (unlocked twice, or lost).
	// ctx governs the release request. If the request fails without the
	// server saying the lock is gone, the release is retried in the
	// background until it succeeds, the server says so, or the Locker is
	// closed; a Lock of the same name by the same Locker waits for that,
	// rather than re-entering the left-over hold with the old token.
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
}

// Inspector is implemented by backends that can see a lock's holder.
type Inspector interface {
	// Inspect reports who holds name; ok is false when nobody does. ctx
	// governs the request.
	Inspect(ctx context.Context, name string) (h Holder, ok bool, err error)
}

// Do runs fn while holding name: it locks (waiting as Lock does), calls fn
// with a context that is cancelled, with the loss as its cause, if the lease
// is lost, and unlocks when fn returns. If the lease was lost while fn ran,
// Do's error wraps ErrLost even when fn returned nil: fn's effects were not
// protected the whole time. ctx governs the wait and fn's context.
func Do(ctx context.Context, l Locker, name string, fn func(ctx context.Context) error) error {
	lease, err := l.Lock(ctx, name)
	if err != nil {
		return err
	}
	workCtx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-lease.Done():
			cancel(lease.Err())
		case <-stop:
		}
	}()
	fnErr := fn(workCtx)
	close(stop)
	<-watched
	cancel(nil)

	if lostErr := lease.Err(); lostErr != nil && !errors.Is(lostErr, ErrUnlocked) {
		return errors.Join(fnErr, lostErr)
	}
	unlockCtx, cancelUnlock := context.WithTimeout(context.WithoutCancel(ctx), DefaultReleaseTimeout)
	defer cancelUnlock()
	return errors.Join(fnErr, lease.Unlock(unlockCtx))
}
