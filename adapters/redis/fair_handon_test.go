package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testenv"
)

// fairWaiter is a fair backend whose waits nobody in the process takes
// up: its grants stay on the server, as those of a waiter that died or
// that gives up just as a release grants it.
func fairWaiter(t *testing.T, c *redis.Client, queueTimeout time.Duration) redislock.FairBackend {
	b, release := redislock.NewFairBackend(c, queueTimeout)
	t.Cleanup(release)
	return b
}

// holdOwner returns who holds name on the server, and its remaining TTL.
func holdOwner(t *testing.T, c *redis.Client, name string, owners ...string) (string, time.Duration) {
	t.Helper()
	ctx := context.Background()
	for _, o := range owners {
		if c.HExists(ctx, "dlock:{"+name+"}", o).Val() {
			return o, c.PTTL(ctx, "dlock:{"+name+"}").Val()
		}
	}
	return "", 0
}

// A release grants the lock to the first waiter at once, for no longer
// than the queue timeout: a waiter that died while queued blocks the
// lock no longer than its place in the queue did. A waiter that gives
// up after such a grant gives the lock back, and the next waiter gets it.
func TestFairReleaseGrantsTheHead(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	const ttl, queueTimeout = 30 * time.Second, 2 * time.Second
	holder := fairWaiter(t, c, queueTimeout)
	req := func(owner string) driver.Request {
		return driver.Request{Name: name, Owner: owner, TTL: ttl, Wait: true}
	}
	g, err := holder.Acquire(ctx, req("holder"))
	if err != nil || !g.Acquired {
		t.Fatalf("the holder's acquire: %+v, %v", g, err)
	}
	first, second := fairWaiter(t, c, queueTimeout), fairWaiter(t, c, queueTimeout)
	for _, w := range []struct {
		b     redislock.FairBackend
		owner string
	}{{first, "first"}, {second, "second"}} {
		if g, err := w.b.Acquire(ctx, req(w.owner)); err != nil || g.Acquired {
			t.Fatalf("%s waiter's attempt: %+v, %v; want a miss", w.owner, g, err)
		}
	}

	if err := holder.Release(ctx, driver.Hold{Name: name, Owner: "holder", Token: g.Token, TTL: ttl, Handle: g.Handle}); err != nil {
		t.Fatal(err)
	}
	owner, left := holdOwner(t, c, name, "holder", "first", "second")
	if owner != "first" {
		t.Fatalf("after the release %q holds the lock, want the first waiter", owner)
	}
	if left <= 0 || left > queueTimeout {
		t.Fatalf("the first waiter was granted %v, want at most the queue timeout %v", left, queueTimeout)
	}

	// The first waiter gives up without having seen its grant.
	if err := first.Leave(ctx, req("first")); err != nil {
		t.Fatal(err)
	}
	if owner, _ := holdOwner(t, c, name, "first", "second"); owner != "second" {
		t.Fatalf("after the first waiter left, %q holds the lock, want the second waiter", owner)
	}
	// The second waiter's next attempt finds the grant.
	g, err = second.Acquire(ctx, req("second"))
	if err != nil || !g.Acquired {
		t.Fatalf("the second waiter's attempt after its grant: %+v, %v", g, err)
	}
	if n := c.LLen(ctx, "dlock:{"+name+"}:queue").Val() + c.HLen(ctx, "dlock:{"+name+"}:queue-waiters").Val(); n != 0 {
		t.Fatalf("%d queue entries left behind", n)
	}
}

// A lease that a release granted counts from the waiter's last attempt
// for at most the queue timeout, which precedes the server's expiry; the
// watchdog renews it within that term, and from then on it runs for the
// TTL.
func TestFairHandedLeaseDeadline(t *testing.T) {
	addr := testenv.RedisAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	const queueTimeout = 1500 * time.Millisecond
	holder := newFair(t, client(t, addr))
	waiter := newFair(t, client(t, addr), redislock.WithQueueTimeout(queueTimeout))
	held, err := holder.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	got := testenv.LockLater(t, ctx, waiter, name)
	admin := client(t, addr)
	dlocktest.Eventually(t, func() bool { return admin.LLen(ctx, "dlock:{"+name+"}:queue").Val() == 1 }, "the waiter queued")
	// The attempt that queued the waiter was sent before now, and the
	// release below grants the lock for that attempt.
	queued := time.Now()
	time.Sleep(queueTimeout / 3)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	defer lease.Unlock(ctx)
	if d := lease.Deadline(); d.After(queued.Add(queueTimeout)) {
		t.Fatalf("the handed lease's deadline is %v after the waiter queued, want at most the queue timeout %v",
			d.Sub(queued), queueTimeout)
	}
	time.Sleep(queueTimeout)
	if err := lease.Err(); err != nil {
		t.Fatalf("the handed lease ended at its first term: %v", err)
	}
	if d := time.Until(lease.Deadline()); d < dlock.DefaultTTL/2 {
		t.Fatalf("after its renewal the lease runs %v more, want about the TTL", d)
	}
}
