package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testenv"
)

// A release publishes on the lock's channel only when an attempt that
// will wait (driver.Request.Wait) found the lock held: a TryLock's miss,
// or no miss at all, leaves nobody to wake. The mark outlives a sibling
// re-entry's release and a hand-off to the next hold of the Locker.
func TestReleasePublishesOnlyForWaiters(t *testing.T) {
	ctx, c, name, next := watchRelease(t, redislock.ChannelOf)
	req := func(owner string, wait bool) driver.Request {
		return driver.Request{Name: name, Owner: owner, TTL: time.Minute, Wait: wait}
	}
	take := func(r driver.Request, hold string) driver.Hold {
		t.Helper()
		g, err := redislock.AcquireAs(ctx, c, r, hold)
		if err != nil || !g.Acquired {
			t.Fatalf("acquire by %s: %+v, %v", r.Owner, g, err)
		}
		return driver.Hold{Name: name, Owner: r.Owner, TTL: r.TTL, Token: g.Token, Handle: hold}
	}
	miss := func(r driver.Request) {
		t.Helper()
		if g, err := redislock.AcquireAs(ctx, c, r, r.Owner); err != nil || g.Acquired {
			t.Fatalf("attempt by %s on a held lock: %+v, %v", r.Owner, g, err)
		}
	}
	release := func(h driver.Hold) {
		t.Helper()
		if err := redislock.Release(ctx, c, h); err != nil {
			t.Fatal(err)
		}
	}

	h := take(req("a", false), "a")
	release(h)
	if got := next(); got != "" {
		t.Fatalf("a release nobody waited for published %q", got)
	}

	h = take(req("a", false), "a")
	miss(req("b", false))
	release(h)
	if got := next(); got != "" {
		t.Fatalf("a release after a TryLock's miss published %q", got)
	}

	h = take(req("a", false), "a")
	miss(req("b", true))
	release(h)
	if got := next(); got != "a" {
		t.Fatalf("a release a waiter waited for published %q, want the releaser's owner \"a\"", got)
	}

	// A waiter of New's backend has an id among the lock's waiters: the
	// release wakes it alone, by its id (the message also wakes every
	// waiter of earlier versions, which take any message).
	const id = "0123456789abcdef"
	missAs := func(r driver.Request, life time.Duration) {
		t.Helper()
		if g, err := redislock.AcquireAsWaiter(ctx, c, r, r.Owner, id, life); err != nil || g.Acquired {
			t.Fatalf("attempt by %s on a held lock: %+v, %v", r.Owner, g, err)
		}
	}
	h = take(req("a", false), "a")
	missAs(req("b", true), time.Minute)
	release(h)
	if got := next(); got != "\x00n"+id {
		t.Fatalf("a release an identified waiter waited for published %q, want %q", got, "\x00n"+id)
	}
	// The lock is kept for that waiter a moment: another's attempt
	// finds it held, the waiter's takes it.
	miss(req("c", false))
	g, err := redislock.AcquireAsWaiter(ctx, c, req("b", true), "b", id, time.Minute)
	if err != nil || !g.Acquired {
		t.Fatalf("the woken waiter's attempt: %+v, %v", g, err)
	}
	release(driver.Hold{Name: name, Owner: "b", TTL: time.Minute, Token: g.Token, Handle: "b"})
	if got := next(); got != "" {
		t.Fatalf("a release nobody else waited for published %q", got)
	}
	// An entry that lapsed (its Locker died) is passed over, and every
	// waiter is woken.
	h = take(req("a", false), "a")
	missAs(req("b", true), time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	release(h)
	if got := next(); got != "a" {
		t.Fatalf("a release whose only listed waiter lapsed published %q, want \"a\"", got)
	}

	// A sibling's re-entry: the first release leaves the lock held, the
	// second frees it and wakes the waiter.
	first := take(req("a", false), "a")
	second := take(req("a", false), "a2")
	miss(req("b", true))
	release(first)
	if got := next(); got != "" {
		t.Fatalf("a release that left the lock held published %q", got)
	}
	release(second)
	if got := next(); got != "a" {
		t.Fatalf("the last hold's release published %q, want \"a\"", got)
	}

	// A hand-off keeps the waiter's mark for the release that ends it.
	h = take(req("a", false), "a")
	miss(req("b", true))
	g, err = redislock.Transfer(ctx, c, h, req("c", false))
	if err != nil || !g.Acquired {
		t.Fatalf("hand-off: %+v, %v", g, err)
	}
	release(driver.Hold{Name: name, Owner: "c", TTL: time.Minute, Token: g.Token, Handle: "c"})
	if got := next(); got != "c" {
		t.Fatalf("the release after a hand-off published %q, want the new holder's owner \"c\"", got)
	}
	// Without a waiter, neither does.
	h = take(req("a", false), "a")
	if g, err = redislock.Transfer(ctx, c, h, req("c", false)); err != nil || !g.Acquired {
		t.Fatalf("hand-off: %+v, %v", g, err)
	}
	release(driver.Hold{Name: name, Owner: "c", TTL: time.Minute, Token: g.Token, Handle: "c"})
	if got := next(); got != "" {
		t.Fatalf("a release after a hand-off nobody waited for published %q", got)
	}
}

// A read-write lock's release publishes only when a read or write Lock
// waited for it: a read lock nobody waits for, or a TryLock's miss,
// wakes nobody.
func TestReadWriteReleasePublishesOnlyForWaiters(t *testing.T) {
	ctx, c, name, next := watchRelease(t, redislock.RWChannelOf)
	a, b := newRW(t, testenv.RedisAddr(t)), newRW(t, testenv.RedisAddr(t))
	unlock := func(l dlock.Lease) {
		t.Helper()
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lock := func(l dlock.Locker) dlock.Lease {
		t.Helper()
		lease, err := l.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return lease
	}

	unlock(lock(a.Read))
	unlock(lock(a.Write))
	if got := next(); got != "" {
		t.Fatalf("releases nobody waited for published %q", got)
	}

	w := lock(a.Write)
	if _, err := b.Read.TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of the read side under a writer: %v", err)
	}
	unlock(w)
	if got := next(); got != "" {
		t.Fatalf("a release after a TryLock's miss published %q", got)
	}

	w = lock(a.Write)
	reader := testenv.LockLater(t, ctx, b.Read, name)
	dlocktest.Eventually(t, func() bool {
		return c.HExists(ctx, redislock.Prefix+"{"+name+"}:rw", "\x00w").Val()
	}, "the waiting reader marked the lock")
	unlock(w)
	if got := next(); got != "released" {
		t.Fatalf("a release a reader waited for published %q, want \"released\"", got)
	}
	if r := <-reader; r != nil {
		unlock(r)
	}
}

// watchRelease is what the publish tests start with: a ctx, a client, a
// fresh name, and next, which tells what was published on the channel
// channelOf gives for name since next's last call. next publishes a
// marker of its own and reads up to it (one channel's messages arrive in
// order), so it needs no wait for a message that might not come. It
// returns "" when nothing was, and fails the test for more than one
// message.
func watchRelease(t *testing.T, channelOf func(name string) string) (ctx context.Context, c *redis.Client, name string, next func() string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	t.Cleanup(cancel)
	c = client(t, testenv.RedisAddr(t))
	name = dlocktest.Name(t)
	channel := channelOf(name)
	sub := c.Subscribe(ctx, channel)
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	messages := sub.Channel()
	markers := 0
	return ctx, c, name, func() string {
		t.Helper()
		markers++
		marker := fmt.Sprintf("marker %d", markers)
		if err := c.Publish(ctx, channel, marker).Err(); err != nil {
			t.Fatal(err)
		}
		var got []string
		for {
			select {
			case m := <-messages:
				if m.Payload != marker {
					got = append(got, m.Payload)
					continue
				}
				if len(got) > 1 {
					t.Fatalf("%d messages for one release: %q", len(got), got)
				}
				if len(got) == 0 {
					return ""
				}
				return got[0]
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
}
