package redislock

import (
	"context"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errjoin"
)

// pushFallback bounds a wait on a push that may have been lost with its
// connection.
const pushFallback = 2 * time.Second

// waitFor calls try until it reports done, ctx ends, or it fails. After
// the first miss it subscribes to channel and tries again at once (so a
// wake-up between the two is not missed), then waits for a wake-up, or
// at most retry (when try gives one) or pushFallback.
func waitFor(ctx context.Context, n *notifier, channel string, try func() (done bool, retry time.Duration, err error)) error {
	var wake <-chan struct{}
	for {
		done, retry, err := try()
		if err != nil || done {
			return err
		}
		if wake == nil {
			w, cancel, err := n.subscribe(ctx, channel)
			if err != nil {
				if ctx.Err() != nil {
					return errjoin.Join(dlock.ErrNotAcquired, ctx.Err())
				}
				return err
			}
			defer cancel()
			wake = w
			continue
		}
		delay := pushFallback
		if retry > 0 && retry < delay {
			delay = retry
		}
		t := time.NewTimer(delay)
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errjoin.Join(dlock.ErrNotAcquired, ctx.Err())
		}
		t.Stop()
	}
}
