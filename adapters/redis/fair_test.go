package redislock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/testenv"
)

func newFair(t testing.TB, c redis.UniversalClient, opts ...dlock.Option) *redislock.Locker {
	t.Helper()
	l, err := redislock.NewFair(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}

func TestFairConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			return newFair(t, client(t, addr), opts...)
		},
		Broken: func(t *testing.T) dlock.Locker { return broken(t, addr, redislock.NewFair) },
	})
}

// Requests made one after another are granted in the order they were made.
func TestFairOrder(t *testing.T) {
	addr := testenv.RedisAddr(t)
	admin := client(t, addr)
	name := dlocktest.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	first, err := newFair(t, client(t, addr)).Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		l := newFair(t, client(t, addr))
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := l.Lock(ctx, name)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			lease.Unlock(ctx)
		}()
		// The next request only once this one is queued on the server.
		dlocktest.Eventually(t, func() bool { return admin.LLen(ctx, "dlock:{"+name+"}:queue").Val() == int64(i+1) }, "the waiter queued")
	}
	first.Unlock(ctx)
	wg.Wait()
	for i, got := range order {
		if got != i {
			t.Fatalf("grant order %v, want requests' order 0..%d", order, n-1)
		}
	}
}

// commandCalls sums the calls of the commands clients send (scripts and
// pub/sub), from INFO commandstats.
func commandCalls(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	calls, err := serverCalls(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return clientCommands(calls)
}

// With 64 waiting Lockers, each on a client of its own as in a process
// of its own, a hand-off costs a bounded number of requests: a release
// wakes one waiter (New: the Locker whose entry among the waiters is
// oldest; NewFair: the head of the queue), not all.
func TestHerdFree(t *testing.T) {
	for _, kind := range []struct {
		name    string
		mk      func(testing.TB, redis.UniversalClient, ...dlock.Option) *redislock.Locker
		waiting func(c *redis.Client, name string) *redis.IntCmd
	}{
		{"lock", newLocker, func(c *redis.Client, name string) *redis.IntCmd {
			return c.ZCard(context.Background(), redislock.LockWaitersOf(name))
		}},
		{"fair", newFair, func(c *redis.Client, name string) *redis.IntCmd {
			return c.LLen(context.Background(), "dlock:{"+name+"}:queue")
		}},
	} {
		t.Run(kind.name, func(t *testing.T) {
			srv := testenv.RedisServers(t, 1)[0] // a server of its own: nothing else counts
			admin := client(t, srv.Addr)
			name := dlocktest.Name(t)
			const waiters = 64
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			// The fresh server holds the name's first grant back for one
			// TTL: take it once with a short one.
			if err := dlock.Do(ctx, kind.mk(t, client(t, srv.Addr), dlock.WithTTL(time.Second)), name, func(context.Context, dlock.Lease) error { return nil }); err != nil {
				t.Fatal(err)
			}
			first, err := kind.mk(t, client(t, srv.Addr)).Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			leases := make(chan dlock.Lease, waiters)
			for range waiters {
				l := kind.mk(t, client(t, srv.Addr))
				go func() {
					lease, err := l.Lock(ctx, name)
					if err != nil {
						t.Error(err)
						return
					}
					leases <- lease
				}()
			}
			dlocktest.Eventually(t, func() bool { return kind.waiting(admin, name).Val() == waiters }, "every waiter is listed on the server")
			// Then until every waiter has subscribed and tried again: quiet.
			before := commandCalls(t, admin)
			for range 50 {
				time.Sleep(100 * time.Millisecond)
				now := commandCalls(t, admin)
				quiet := now == before
				before = now
				if quiet {
					break
				}
			}
			first.Unlock(ctx)
			for range waiters {
				lease := <-leases
				lease.Unlock(ctx)
			}
			per := float64(commandCalls(t, admin)-before) / waiters
			t.Logf("%.2f requests per hand-off with %d waiters", per, waiters)
			if per > 3 {
				t.Fatalf("%.2f requests per hand-off: waiters are stampeding", per)
			}
			if n := kind.waiting(admin, name).Val(); n != 0 {
				t.Fatalf("%d waiters still listed after every waiter took the lock", n)
			}
		})
	}
}

// An attempt made again, as dlock makes one whose outcome it does not know
// (driver.DeadlineBound), changes nothing the first made: a queued waiter
// keeps one place, and a hold taken is counted once, so one release frees
// the lock.
func TestFairRetriedAttemptIsIdempotent(t *testing.T) {
	ctx := context.Background()
	c := client(t, testenv.RedisAddr(t))
	b, release := redislock.NewFairBackend(c, 5*time.Second)
	defer release()
	name := dlocktest.Name(t)
	holder := driver.Request{Name: name, Owner: "holder#1", TTL: 10 * time.Second}
	waiter := driver.Request{Name: name, Owner: "waiter#1", TTL: 10 * time.Second, Wait: true}
	held, err := b.Acquire(ctx, holder)
	if err != nil || !held.Acquired {
		t.Fatalf("holder's attempt: %+v, %v", held, err)
	}
	for i := range 2 {
		if g, err := b.Acquire(ctx, waiter); err != nil || g.Acquired {
			t.Fatalf("waiter's attempt %d while held: %+v, %v", i, g, err)
		}
	}
	if n, err := redislock.QueueLen(ctx, c, name); err != nil || n != 1 {
		t.Fatalf("queue after the waiter's two attempts: %d entries (%v), want 1", n, err)
	}
	// The release grants the lock to the waiter; its attempts find it.
	if err := b.Release(ctx, driver.Hold{Name: name, Owner: holder.Owner, Token: held.Token, Handle: held.Handle, TTL: holder.TTL}); err != nil {
		t.Fatal(err)
	}
	var tokens [2]uint64
	var g driver.Grant
	for i := range tokens {
		if g, err = b.Acquire(ctx, waiter); err != nil || !g.Acquired {
			t.Fatalf("waiter's attempt %d after the release: %+v, %v", i, g, err)
		}
		tokens[i] = g.Token
	}
	if tokens[0] != tokens[1] || tokens[0] <= held.Token {
		t.Errorf("tokens of the two attempts %v, after %d: want one, larger", tokens, held.Token)
	}
	if err := b.Release(ctx, driver.Hold{Name: name, Owner: waiter.Owner, Token: g.Token, Handle: g.Handle, TTL: waiter.TTL}); err != nil {
		t.Fatal(err)
	}
	other := driver.Request{Name: name, Owner: "other#1", TTL: 10 * time.Second}
	if g, err := b.Acquire(ctx, other); err != nil || !g.Acquired {
		t.Fatalf("after one release of the twice-attempted hold, another owner's attempt: %+v, %v (counted twice?)", g, err)
	} else if err := b.Release(ctx, driver.Hold{Name: name, Owner: other.Owner, Token: g.Token, Handle: g.Handle, TTL: other.TTL}); err != nil {
		t.Fatal(err)
	}
}
