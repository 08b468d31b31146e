package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testenv"
)

// slowFallback makes a waiter rely on wake-ups alone for a minute, so a
// wake-up that goes astray shows as a Lock that does not return.
func slowFallback(c *dlock.Config) { c.PushFallback = time.Minute }

// wakeOneSetup returns a ctx, the server's address, a client, a fresh
// name, and a lease on name that outlasts the test, so only a wake-up
// ends a wait.
func wakeOneSetup(t *testing.T) (ctx context.Context, addr string, admin *redis.Client, name string, holder dlock.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	t.Cleanup(cancel)
	addr = testenv.RedisAddr(t)
	admin = client(t, addr)
	name = dlocktest.Name(t)
	holder, err := newLocker(t, admin, dlock.WithTTL(time.Minute)).Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, addr, admin, name, holder
}

// handOver unlocks holder, then requires the waiter's Lock (next) to get
// the lock, within the test's ctx: a waiter with slowFallback that no
// release wakes does not. check runs while the waiter holds it.
func handOver(t *testing.T, ctx context.Context, holder dlock.Lease, next <-chan dlock.Lease, check func()) {
	t.Helper()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-next
	if lease == nil {
		t.Fatal("the waiter did not get the lock")
	}
	if check != nil {
		check()
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// listed reports whether id is among the waiters of name.
func listed(ctx context.Context, c *redis.Client, name, id string) bool {
	return c.ZScore(ctx, redislock.LockWaitersOf(name), id).Err() == nil
}

// A waiter that gives up leaves the waiters at once, so the release wakes
// the one still waiting, which the release would otherwise pass over for
// the older entry.
func TestGivingUpLeavesTheWaiters(t *testing.T) {
	ctx, addr, admin, name, holder := wakeOneSetup(t)

	quitter := newLocker(t, client(t, addr), slowFallback)
	stay := newLocker(t, client(t, addr), slowFallback)
	quit, stop := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := quitter.Lock(quit, name)
		gaveUp <- err
	}()
	dlocktest.Eventually(t, func() bool { return listed(ctx, admin, name, redislock.WaiterID(quitter)) }, "the first waiter is listed")
	next := testenv.LockLater(t, ctx, stay, name)
	dlocktest.Eventually(t, func() bool { return listed(ctx, admin, name, redislock.WaiterID(stay)) }, "the second waiter is listed")
	// The list expires by itself, as every key of a lock does.
	if ttl := admin.PTTL(ctx, redislock.LockWaitersOf(name)).Val(); ttl <= 0 {
		t.Fatalf("the waiters' list never expires (PTTL %v)", ttl)
	}

	stop()
	if err := <-gaveUp; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Lock that gave up: %v, want ErrNotAcquired", err)
	}
	// Its Lock waits up to CancelMargin for the leave.
	dlocktest.Eventually(t, func() bool { return !listed(ctx, admin, name, redislock.WaiterID(quitter)) }, "the waiter that gave up is no longer listed")

	handOver(t, ctx, holder, next, nil)
}

// A release that wakes a Locker none of whose waiters is left (its entry
// outlived its wait: an attempt whose reply was lost, say) does not lose
// the wake-up: the Locker's process passes it on to the next waiter.
func TestUnclaimedWakeUpPassesOn(t *testing.T) {
	ctx, addr, admin, name, holder := wakeOneSetup(t)

	// Two Lockers of one process (one client): idle is listed first but
	// does not wait.
	shared := client(t, addr)
	idle := newLocker(t, shared, slowFallback)
	waiter := newLocker(t, shared, slowFallback)
	if err := admin.ZAdd(ctx, redislock.LockWaitersOf(name), redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: redislock.WaiterID(idle)}).Err(); err != nil {
		t.Fatal(err)
	}
	next := testenv.LockLater(t, ctx, waiter, name)
	dlocktest.Eventually(t, func() bool { return listed(ctx, admin, name, redislock.WaiterID(waiter)) }, "the waiter is listed")

	handOver(t, ctx, holder, next, func() {
		if listed(ctx, admin, name, redislock.WaiterID(idle)) {
			t.Fatal("the release did not take the idle Locker's entry")
		}
	})
}

// A wake-up passed on by the process it was sent to keeps the lock for
// the next waiter, and leaves the first Locker's entry alone: the release
// took it, and the Locker's next attempt may have put it back meanwhile,
// so taking it out would leave a waiter unlisted, woken by no release.
func TestPassOnKeepsTheEntry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	c := client(t, testenv.RedisAddr(t))
	name := dlocktest.Name(t)
	const first, second = "aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"
	// A holder, then first and second wait, first longest; the release
	// keeps the lock for first.
	h := driver.Hold{Name: name, Owner: "holder", TTL: time.Minute, Handle: "holder"}
	g, err := redislock.AcquireAs(ctx, c, driver.Request{Name: name, Owner: "holder", TTL: time.Minute}, "holder")
	if err != nil || !g.Acquired {
		t.Fatalf("holder: %+v, %v", g, err)
	}
	h.Token = g.Token
	for i, id := range []string{first, second} {
		r := driver.Request{Name: name, Owner: id, TTL: time.Minute, Wait: true}
		if g, err := redislock.AcquireAsWaiter(ctx, c, r, id, id, time.Minute); err != nil || g.Acquired {
			t.Fatalf("waiter %d: %+v, %v", i, g, err)
		}
		time.Sleep(2 * time.Millisecond) // entries are ordered by their last attempt
	}
	if err := redislock.Release(ctx, c, h); err != nil {
		t.Fatal(err)
	}
	if got := redislock.KeptFor(ctx, c, name); got != first {
		t.Fatalf("the release kept the lock for %q, want %q", got, first)
	}
	// first's next attempt came meanwhile: its entry is back, the newest.
	c.ZAdd(ctx, redislock.LockWaitersOf(name), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: first})

	if err := redislock.PassOn(ctx, c, name, first); err != nil {
		t.Fatal(err)
	}
	if got := redislock.KeptFor(ctx, c, name); got != second {
		t.Fatalf("after the pass-on the lock is kept for %q, want %q", got, second)
	}
	if !listed(ctx, c, name, first) {
		t.Fatal("the pass-on took out the entry the Locker's next attempt made")
	}
}

// A release by a Locker of an earlier dlock release, which frees the lock
// and publishes its owner on the lock's channel, wakes this release's
// waiters.
func TestEarlierReleaseWakesWaiters(t *testing.T) {
	ctx, addr, admin, name, holder := wakeOneSetup(t)
	waiter := newLocker(t, client(t, addr), slowFallback)
	next := testenv.LockLater(t, ctx, waiter, name)
	dlocktest.Eventually(t, func() bool { return listed(ctx, admin, name, redislock.WaiterID(waiter)) }, "the waiter is listed")

	// What release.lua of earlier releases did for the last hold of a
	// marked lock: delete it, publish the owner.
	if err := admin.Del(ctx, redislock.Prefix+"{"+name+"}").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Publish(ctx, redislock.ChannelOf(name), "earlier#owner").Err(); err != nil {
		t.Fatal(err)
	}
	lease := <-next
	if lease == nil {
		t.Fatal("the waiter did not get the lock")
	}
	if listed(ctx, admin, name, redislock.WaiterID(waiter)) {
		t.Fatal("the waiter that took the lock is still listed")
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The holder's lease is gone with its key.
	if err := holder.Unlock(ctx); err == nil {
		t.Fatal("Unlock of a lease whose key was deleted succeeded")
	}
}

// A waiter's subscription does not wake it: after the attempt that finds
// the lock held and the one right after subscribing, it makes none until
// a release wakes it. (Each attempt is a script call; the server is the
// test's own, so its counts are these Lockers' alone.)
func TestSubscribingDoesNotWakeTheWaiter(t *testing.T) {
	for _, kind := range []struct {
		name  string
		new   func(redis.UniversalClient, ...dlock.Option) (*redislock.Locker, error)
		calls int64
	}{{"lock", redislock.New, 5}, {"fair", redislock.NewFair, 4}} {
		t.Run(kind.name, func(t *testing.T) {
			server := testenv.RedisServers(t, 1)[0]
			ttl := dlock.WithTTL(time.Second)
			server.WaitUp(t, time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			admin := client(t, server.Addr)
			calls := func(cmd string) int64 {
				calls, err := serverCalls(ctx, admin)
				if err != nil {
					t.Fatal(err)
				}
				return calls[cmd]
			}
			mk := func() *redislock.Locker {
				l, err := kind.new(client(t, server.Addr), ttl, slowFallback)
				if err != nil {
					t.Fatal(err)
				}
				return testenv.Closing(t, l)
			}
			name := dlocktest.Name(t)
			holder, err := mk().Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			waiter := mk()
			before := calls("evalsha")
			next := testenv.LockLater(t, ctx, waiter, name)
			dlocktest.Eventually(t, func() bool {
				return calls("subscribe") > 0 && calls("evalsha")-before >= 2
			}, "the waiter subscribed and tried again")
			handOver(t, ctx, holder, next, nil)
			// Two attempts, the release, the attempt it woke (the fair
			// lock's release grants instead), and the waiter's unlock.
			if got := calls("evalsha") - before; got > kind.calls {
				t.Errorf("%d script calls from the wait to the waiter's unlock, want %d: a wake-up without a release", got, kind.calls)
			}
		})
	}
}
