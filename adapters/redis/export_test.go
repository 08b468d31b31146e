package redislock

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
)

// FairBackend is the fair lock's backend, driven directly by tests.
type FairBackend interface {
	driver.Backend
	driver.Leaver
}

// NewFairBackend returns a fair lock's backend on c, and what gives back
// its share of c's notifier.
func NewFairBackend(c redis.UniversalClient, queueTimeout time.Duration) (FairBackend, func()) {
	n := notifierFor(c)
	return newFairBackend(c, n, queueTimeout), func() { _ = n.release() }
}

// BoundsCalls is what New's backend on c, waiting for replicas, tells
// dlock about its calls' deadlines (driver.DeadlineBound).
func BoundsCalls(c redis.UniversalClient, replicas int) bool {
	return (&backend{client: c, replicas: replicas}).BoundsCalls()
}

// ChannelOf is the channel a release of name's lock publishes on.
func ChannelOf(name string) string { return keysFor(name).channel() }

// AcquireAs makes one attempt of New's lock on c for r as hold (a hold id;
// the backend's own is r.Owner, and a sibling's re-entry has another).
func AcquireAs(ctx context.Context, c redis.UniversalClient, r driver.Request, hold string) (driver.Grant, error) {
	return acquireOn(ctx, c, r, hold, true, "")
}

// AcquireAsWaiter is AcquireAs for a waiter of New with id, whose entry
// among the waiters lasts life.
func AcquireAsWaiter(ctx context.Context, c redis.UniversalClient, r driver.Request, hold, id string, life time.Duration) (driver.Grant, error) {
	return acquireWith(ctx, c, r, hold, true, waiterEntry{id: id, life: life}, 0, 0, "")
}

// Release ends h of New's lock on c, publishing as New's backend does.
func Release(ctx context.Context, c redis.UniversalClient, h driver.Hold) error {
	return releaseOn(ctx, c, h, "publish")
}

// Transfer hands h of New's lock on c to r.Owner, as New's backend does.
func Transfer(ctx context.Context, c redis.UniversalClient, h driver.Hold, r driver.Request) (driver.Grant, error) {
	return handing{&backend{client: c}}.Transfer(ctx, h, r)
}

// RWChannelOf is the channel a release of name's read-write lock
// publishes on.
func RWChannelOf(name string) string { return keysFor(name).rwChannel() }

// QueueLen is the number of entries in the fair lock's queue of name.
func QueueLen(ctx context.Context, c redis.UniversalClient, name string) (int64, error) {
	return c.LLen(ctx, keysFor(name).queue()).Result()
}

// LockWaitersOf is the key of New's waiters of name (a zset of Locker
// ids, see scripts/lock_waiters.lua).
func LockWaitersOf(name string) string { return keysFor(name).lockWaiters() }

// WaiterID is l's id among New's waiters.
func WaiterID(l *Locker) string { return l.waiterID }

// PassOn runs what a process does with a wake-up sent to New's Locker id
// when none of its waiters is there: the lock kept for id passes to the
// next waiter; id's entry stays.
func PassOn(ctx context.Context, c redis.UniversalClient, name, id string) error {
	k := keysFor(name)
	return leave(ctx, c, k.lock(), k.lockWaiters(), id, k.channel(), "publish", false)
}

// KeptFor is the waiter New's lock of name is kept for, or "".
func KeptFor(ctx context.Context, c redis.UniversalClient, name string) string {
	return c.HGet(ctx, keysFor(name).lock(), "\x00r").Val()
}

// LockKey is the key of name's lock.
func LockKey(name string) string { return keysFor(name).lock() }
