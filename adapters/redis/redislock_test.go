package redislock_test

import (
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
		SharedOwners: true,
	})
}
