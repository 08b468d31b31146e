package redislock

import (
	"context"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/wakeup"
)

// pushFallback bounds a wait on a push that may have been lost with its
// connection.
const pushFallback = 2 * time.Second

// waitFor is wakeup.Wait on channel of n, for the semaphore and the latch:
// a wait that ctx ends fails with dlock.ErrNotAcquired joined with ctx's
// error, as a Lock does.
func waitFor(ctx context.Context, n *notifierRef, channel string, try func() (done bool, retry time.Duration, err error)) error {
	subscribe := func(ctx context.Context) (<-chan struct{}, func(), error) { return n.subscribe(ctx, channel) }
	err := wakeup.Wait(ctx, subscribe, pushFallback, try)
	if err != nil && ctx.Err() != nil {
		return errjoin.Join(dlock.ErrNotAcquired, ctx.Err())
	}
	return err
}
