package redislock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func ping(c *redis.Client) dlocktest.RoundTrip {
	return func(ctx context.Context) error { return c.Ping(ctx).Err() }
}

func BenchmarkUncontended(b *testing.B) {
	c := client(b, testenv.RedisAddr(b))
	dlocktest.BenchUncontended(b, newLocker(b, c), ping(c))
}

func BenchmarkContended(b *testing.B) {
	addr := testenv.RedisAddr(b)
	lockers := make([]dlock.Locker, 8)
	for i := range lockers {
		lockers[i] = newLocker(b, client(b, addr)) // own connections, like processes
	}
	dlocktest.BenchContended(b, lockers, ping(client(b, addr)))
}
