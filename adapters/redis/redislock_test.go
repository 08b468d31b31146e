package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func client(t testing.TB, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func newLocker(t testing.TB, c redis.UniversalClient, opts ...dlock.Option) *redislock.Locker {
	t.Helper()
	l, err := redislock.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}

func TestConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			// Each Locker has its own client, as separate processes would.
			return newLocker(t, client(t, addr), opts...)
		},
		Broken: func(t *testing.T) dlock.Locker { return broken(t, addr, redislock.New) },
		Dial: func(t *testing.T, via string, opts ...dlock.Option) dlock.Locker {
			return newLocker(t, client(t, via), opts...)
		},
		Addr: addr,
	})
}

// broken returns a Locker made by mk on a client that is then closed.
func broken[L dlock.Locker](t *testing.T, addr string, mk func(redis.UniversalClient, ...dlock.Option) (L, error)) dlock.Locker {
	c := client(t, addr)
	l, err := mk(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	return testenv.Closing(t, any(l).(interface {
		dlock.Locker
		Close(context.Context) error
	}))
}

// Every key a lock leaves behind expires by itself (the fencing counter a
// day after its last token), so per-entity names do not grow Redis
// forever; a name that comes back still gets a larger token.
func TestNoKeyLeftForever(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	ctx := context.Background()
	for kind, l := range map[string]dlock.Locker{"lock": newLocker(t, c), "fair": newFair(t, c)} {
		name := dlocktest.Name(t) + "." + kind
		var last uint64
		for range 2 {
			lease, err := l.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if lease.Token() <= last {
				t.Fatalf("%s: token %d after %d", kind, lease.Token(), last)
			}
			last = lease.Token()
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			// Drop the counter, as its expiry would.
			keys, err := c.Keys(ctx, redislock.Prefix+"{"+name+"}*").Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) == 0 {
				t.Fatalf("%s: no fencing counter left after a lock", kind)
			}
			for _, k := range keys {
				if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
					t.Errorf("%s: key %s never expires (PTTL %v)", kind, k, ttl)
				}
			}
			c.Del(ctx, keys...)
		}
	}
}

// Redisson's interrupted tryLock: the acquire script runs, its reply is
// held back, and the caller's ctx ends first. Lock returns ErrNotAcquired,
// and the hold taken on its behalf is given back once the reply (or the
// error) comes in, not left for a TTL.
func TestLostReplyLeavesNothing(t *testing.T) {
	addr := testenv.RedisAddr(t)
	for _, tc := range lockerKinds {
		for _, ctxTimeouts := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ContextTimeoutEnabled=%v", tc.name, ctxTimeouts), func(t *testing.T) {
				testLostReply(t, addr, tc.make, ctxTimeouts)
			})
		}
	}
}

// lockerKinds are the package's two locks, for the tests that run on each.
var lockerKinds = []struct {
	name string
	make lockerMaker
}{
	{"New", newLocker},
	{"NewFair", newFair},
}

// testLostReply is TestLostReplyLeavesNothing on the Locker mk makes.
func testLostReply(t *testing.T, addr string, mk lockerMaker, ctxTimeouts bool) {
	p, cut, name := heldBack(t, addr, mk, ctxTimeouts) // TTL 30s
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := cut.Lock(short, name); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with its reply held back: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	p.Restore()
	takenByAnother(t, addr, mk, name, "after the lost reply (the orphan would hold 30s)")
}

// lockerMaker makes one of the package's Lockers on a client.
type lockerMaker func(testing.TB, redis.UniversalClient, ...dlock.Option) *redislock.Locker

// heldBack returns a proxy to addr, a Locker from mk on a client through
// it (connected, with ContextTimeoutEnabled as given), and a name; the
// proxy holds back the server's replies from now on.
func heldBack(t *testing.T, addr string, mk lockerMaker, ctxTimeouts bool) (*testenv.Proxy, *redislock.Locker, string) {
	t.Helper()
	p := testenv.NewProxy(t, addr)
	via := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: ctxTimeouts})
	t.Cleanup(func() { via.Close() })
	cut := mk(t, via)
	if err := via.Ping(context.Background()).Err(); err != nil { // connect first
		t.Fatal(err)
	}
	p.HoldReplies()
	return p, cut, dlocktest.Name(t)
}

// takenByAnother fails t unless a Locker from mk on a client of its own
// takes name within twice DefaultReleaseTimeout: what an abandoned
// acquire took has been given back.
func takenByAnother(t *testing.T, addr string, mk lockerMaker, name, after string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*dlock.DefaultReleaseTimeout)
	defer cancel()
	lease, err := mk(t, client(t, addr)).Lock(ctx, name)
	if err != nil {
		t.Fatalf("another owner %s: %v", after, err)
	}
	lease.Unlock(ctx)
}

// A client with ContextTimeoutEnabled keeps each command's ctx deadline,
// so dlock makes its requests on the caller's goroutine; go-redis does
// not watch a cancellation. A Lock whose reply is held back still returns
// within CancelMargin of its ctx's cancellation, and the hold taken on its
// behalf is given back.
func TestContextTimeoutsLockHonoursCancel(t *testing.T) {
	addr := testenv.RedisAddr(t)
	for _, tc := range lockerKinds {
		t.Run(tc.name, func(t *testing.T) { testHonoursCancel(t, addr, tc.make) })
	}
}

// testHonoursCancel is TestContextTimeoutsLockHonoursCancel on the Locker
// mk makes.
func testHonoursCancel(t *testing.T, addr string, mk lockerMaker) {
	p, cut, name := heldBack(t, addr, mk, true)
	cancellable, cancelled := testenv.CancelSoon()
	_, err := cut.Lock(cancellable, name)
	returned := time.Now()
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock with its reply held back, cancelled: %v, want ErrNotAcquired and Canceled", err)
	}
	testenv.CheckWithinMargin(t, "Lock", returned, cancelled)
	p.Restore()
	takenByAnother(t, addr, mk, name, "after the cancelled Lock")
}

// The conformance suite with requests on the caller's goroutine, on
// both locks.
func TestConformanceContextTimeouts(t *testing.T) {
	addr := testenv.RedisAddr(t)
	for _, tc := range lockerKinds {
		t.Run(tc.name, func(t *testing.T) {
			dlocktest.Run(t, dlocktest.Harness{
				New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
					c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
					t.Cleanup(func() { c.Close() })
					return tc.make(t, c, opts...)
				},
			})
		})
	}
}

// bsm/redislock's TestLock_Release_not_own: the lock key overwritten
// behind the holder's back (another type). Unlock says the lease had
// ended, instead of failing with WRONGTYPE and retrying.
func TestLockKeyOverwritten(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	ctx := context.Background()
	l := newLocker(t, c)
	name := dlocktest.Name(t)
	lease, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	key := redislock.Prefix + "{" + name + "}"
	if err := c.Set(ctx, key, "someone else's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lease.Refresh(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh of an overwritten lock: %v, want ErrNotHeld", err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of an overwritten lock: %v, want ErrNotHeld", err)
	}
	c.Del(ctx, key)
	again, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("the same Locker's next TryLock: %v", err)
	}
	again.Unlock(ctx)
}

// Sentinel failover to a replica that lagged: its fencing counter is
// older than the last token granted. The next token must still be larger
// (a hybrid clock), never continue from the old counter.
func TestTokensSurviveAnOlderCounter(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	ctx := context.Background()
	l := newLocker(t, c)
	name := dlocktest.Name(t)
	first, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	first.Unlock(ctx)
	fence := redislock.Prefix + "{" + name + "}:fence"
	if err := c.Set(ctx, fence, first.Token()-1000, 0).Err(); err != nil { // as on a lagging replica
		t.Fatal(err)
	}
	second, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Unlock(ctx)
	if second.Token() <= first.Token() {
		t.Fatalf("token %d after %d: it went back with the counter", second.Token(), first.Token())
	}
}

// A counter ahead of the server's clock (tokens drawn faster than one a
// microsecond, or a clock that went back): the next tokens continue from
// the counter, and the counter keeps its expiry.
func TestTokensFollowACounterAheadOfTheClock(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	ctx := context.Background()
	l := newLocker(t, c)
	name := dlocktest.Name(t)
	fence := redislock.Prefix + "{" + name + "}:fence"
	ahead := uint64(time.Now().Add(24*time.Hour).UnixMicro()) + 12345
	if err := c.Set(ctx, fence, ahead, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 2; i++ {
		lease, err := l.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if lease.Token() != ahead+i {
			t.Fatalf("token %d from a counter at %d, want %d", lease.Token(), ahead+i-1, ahead+i)
		}
		if got, err := c.Get(ctx, fence).Uint64(); err != nil || got != ahead+i {
			t.Fatalf("the counter is %d (%v) after token %d", got, err, ahead+i)
		}
		if ttl := c.PTTL(ctx, fence).Val(); ttl <= time.Hour {
			t.Fatalf("the counter's expiry is %v, want the day a drawn token sets", ttl)
		}
	}
}

// The Lockers, semaphores and latches of one client share one pub/sub
// connection, as tablelock's share one listener per *sql.DB.
func TestOnePubSubConnectionPerClient(t *testing.T) {
	server := testenv.RedisServers(t, 1)[0]
	c := client(t, server.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	// A fresh server holds first grants back for one TTL (the package
	// doc's "Restarts"), and a held-back Lock waits on its client's pub/sub
	// connection: short TTLs, and a server up for longer.
	ttl := dlock.WithTTL(2 * time.Second)
	server.WaitUp(t, 2*time.Second)
	holder := newLocker(t, client(t, server.Addr), ttl)
	a, b := newLocker(t, c, ttl), newLocker(t, c, ttl)
	sem, err := redislock.NewSemaphore(c, dlocktest.Name(t), 1, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer sem.Close()
	names := []string{dlocktest.Name(t), dlocktest.Name(t)}
	var leases []dlock.Lease
	for _, name := range names {
		lease, err := holder.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
	}
	permit, err := sem.Acquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 3)
	go func() { _, err := a.Lock(ctx, names[0]); got <- err }()
	go func() { _, err := b.Lock(ctx, names[1]); got <- err }()
	go func() { _, err := sem.Acquire(ctx, 1); got <- err }()
	// Three channels waited on: one connection subscribed to all three.
	var list string
	dlocktest.Eventually(t, func() bool {
		list, err = c.ClientList(ctx).Result()
		return err == nil && strings.Contains(list, " sub=3 ")
	}, "the three waiters subscribed")
	pubsub := 0
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if !strings.Contains(line, " sub=0 ") {
			pubsub++
		}
	}
	if pubsub != 1 {
		t.Fatalf("%d pub/sub connections for two Lockers and a semaphore on one client, want 1:\n%s", pubsub, list)
	}
	for _, l := range leases {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := permit.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
}

// valueClient is a client wrapper passed by value whose type cannot be
// compared (it holds a slice), as an instrumenting wrapper might be.
type valueClient struct {
	redis.UniversalClient
	tags []string
}

// outerClient is a comparable type holding an uncomparable client.
type outerClient struct{ redis.UniversalClient }

// A client whose type cannot key a map works with every constructor: its
// Lockers wait and are woken as any other's, each on a pub/sub connection
// of its own, where sharing one would panic ("hash of unhashable type").
func TestUncomparableClient(t *testing.T) {
	server := testenv.RedisServers(t, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	ttl := dlock.WithTTL(2 * time.Second)
	server.WaitUp(t, 2*time.Second)
	// Wrapped once more, in a type that is comparable but holds a value
	// that is not: comparing two of them panics all the same.
	c := outerClient{valueClient{UniversalClient: client(t, server.Addr), tags: []string{"svc"}}}
	for _, mk := range []struct {
		what string
		new  func(redis.UniversalClient, ...dlock.Option) (*redislock.Locker, error)
	}{{"New", redislock.New}, {"NewFair", redislock.NewFair}} {
		a, err := mk.new(c, ttl)
		if err != nil {
			t.Fatalf("%s: %v", mk.what, err)
		}
		b, err := mk.new(c, ttl)
		if err != nil {
			t.Fatalf("%s: %v", mk.what, err)
		}
		// Closed below, before the next round; these close them (a
		// second Close is a no-op) when the round fails midway.
		testenv.Closing(t, a)
		testenv.Closing(t, b)
		name := dlocktest.Name(t)
		held, err := a.Lock(ctx, name)
		if err != nil {
			t.Fatalf("%s: Lock: %v", mk.what, err)
		}
		subscribed := func() bool {
			list, err := c.ClientList(ctx).Result()
			return err == nil && strings.Contains(list, " sub=1 ")
		}
		next := testenv.LockLater(t, ctx, b, name)
		dlocktest.Eventually(t, subscribed, mk.what+": the waiter subscribed")
		handOver(t, ctx, held, next, nil)
		for _, l := range []*redislock.Locker{a, b} {
			if err := l.Close(ctx); err != nil {
				t.Fatalf("%s: Close: %v", mk.what, err)
			}
		}
		// Its own pub/sub connection goes with it, so the next round
		// sees only its own waiter's.
		dlocktest.Eventually(t, func() bool { return !subscribed() }, mk.what+": the pub/sub connection closed")
	}
	rw, err := redislock.NewReadWrite(c, ttl)
	if err != nil {
		t.Fatalf("NewReadWrite: %v", err)
	}
	defer rw.Read.Close(ctx)
	defer rw.Write.Close(ctx)
	rl, err := rw.Read.Lock(ctx, dlocktest.Name(t))
	if err != nil {
		t.Fatalf("read lock: %v", err)
	}
	if err := rl.Unlock(ctx); err != nil {
		t.Fatalf("read unlock: %v", err)
	}
	sem, err := redislock.NewSemaphore(c, dlocktest.Name(t), 1, ttl)
	if err != nil {
		t.Fatalf("NewSemaphore: %v", err)
	}
	defer sem.Close()
	latch, err := redislock.NewLatch(c, dlocktest.Name(t))
	if err != nil {
		t.Fatalf("NewLatch: %v", err)
	}
	defer latch.Close()
	r, err := redislock.NewRedlock([]redis.UniversalClient{c, client(t, "127.0.0.1:1"), client(t, "127.0.0.1:2")})
	if err != nil {
		t.Fatalf("NewRedlock: %v", err)
	}
	if err := r.Close(ctx); err != nil {
		t.Fatalf("Redlock Close: %v", err)
	}
}
