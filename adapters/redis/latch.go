package redislock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
)

// Latch is a countdown latch (Redisson's RCountDownLatch): it is set to a
// count, counted down by any process, and opens when the count reaches
// zero, releasing every waiter. An unset latch is open.
type Latch struct {
	client   redis.UniversalClient
	key      string
	channel  string
	notifier *notifierRef
}

// NewLatch returns the latch name. It does no I/O.
func NewLatch(client redis.UniversalClient, name string) (*Latch, error) {
	if err := checkClient(client); err != nil {
		return nil, err
	}
	if err := dlock.ValidateName(name); err != nil {
		return nil, err
	}
	k := keysFor(name)
	return &Latch{client: client, key: k.lock() + ":latch", channel: k.lock() + ":latch-open", notifier: notifierFor(client)}, nil
}

// TrySetCount sets the count if the latch is open (not set, or counted to
// zero) and reports whether it did. count must be positive.
func (l *Latch) TrySetCount(ctx context.Context, count int64) (bool, error) {
	if count <= 0 {
		return false, fmt.Errorf("redislock: latch count must be positive, got %d", count)
	}
	return l.client.SetNX(ctx, l.key, count, 0).Result()
}

// CountDown decrements the count; at zero the latch opens and every
// waiter is released. Counting down an open latch does nothing.
func (l *Latch) CountDown(ctx context.Context) error {
	return latchCountDownScript.Run(ctx, l.client, []string{l.key}, l.channel, l.notifier.publishCommand()).Err()
}

// Count returns the count left; 0 means open.
func (l *Latch) Count(ctx context.Context) (int64, error) {
	n, err := l.client.Get(ctx, l.key).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// Await waits until the latch is open or ctx ends (then the error wraps
// dlock.ErrNotAcquired and ctx.Err()). It is woken by pub/sub.
func (l *Latch) Await(ctx context.Context) error {
	return waitFor(ctx, l.notifier, l.channel, func() (bool, time.Duration, error) {
		n, err := l.Count(ctx)
		return n == 0, 0, err
	})
}

// Close gives back the latch's share of the client's pub/sub connection,
// which the last user closes.
func (l *Latch) Close() error { return l.notifier.release() }
