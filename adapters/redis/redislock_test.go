package redislock_test

import (
	"context"
	"testing"

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
