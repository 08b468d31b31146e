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
	// Own connections, like processes.
	dlocktest.BenchContended(b, func(b *testing.B) dlock.Locker { return newLocker(b, client(b, addr)) }, ping(client(b, addr)))
}

// BenchmarkContendedFair is W2 on the fair lock (the "fair" rows),
// beside BenchmarkContended.
func BenchmarkContendedFair(b *testing.B) {
	addr := testenv.RedisAddr(b)
	b.Run("fair", func(b *testing.B) {
		dlocktest.BenchContended(b, func(b *testing.B) dlock.Locker { return newFair(b, client(b, addr)) }, ping(client(b, addr)))
	})
}

// commandCount sums the client-issued commands of INFO commandstats.
func commandCount(c *redis.Client) dlocktest.Requests {
	return func(ctx context.Context) (int64, error) {
		stats, err := c.InfoMap(ctx, "commandstats").Result()
		if err != nil {
			return 0, err
		}
		var n int64
		for cmd, fields := range stats["Commandstats"] {
			switch cmd {
			case "cmdstat_evalsha", "cmdstat_eval", "cmdstat_subscribe", "cmdstat_unsubscribe":
				var calls int64
				if _, err := fmtSscan(fields, &calls); err == nil {
					n += calls
				}
			}
		}
		return n, nil
	}
}

// BenchmarkSeckill is W3 through the lock and the fair lock, each one
// Locker shared by the buyers; stock and orders are in PostgreSQL.
func BenchmarkSeckill(b *testing.B) {
	addr := testenv.RedisAddr(b)
	db := testenv.SaleDB(b, testenv.Postgres)
	b.Run("lock", func(b *testing.B) { dlocktest.BenchSeckill(b, newLocker(b, client(b, addr)), db) })
	b.Run("fair", func(b *testing.B) { dlocktest.BenchSeckill(b, newFair(b, client(b, addr)), db) })
}

func BenchmarkHerd(b *testing.B) {
	for _, kind := range []string{"lock", "fair"} {
		b.Run(kind, func(b *testing.B) {
			srv := testenv.RedisServers(b, 1)[0] // nothing else counts here
			mk := func() dlock.Locker {
				if kind == "fair" {
					return newFair(b, client(b, srv.Addr))
				}
				return newLocker(b, client(b, srv.Addr))
			}
			waiters := make([]dlock.Locker, 64)
			for i := range waiters {
				waiters[i] = mk()
			}
			dlocktest.BenchHerd(b, mk(), waiters, commandCount(client(b, srv.Addr)))
		})
	}
}
