package redislock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func ping(c *redis.Client) dlocktest.RoundTrip {
	return func(ctx context.Context) error { return c.Ping(ctx).Err() }
}

func BenchmarkUncontended(b *testing.B) {
	c := benchClient(b, testenv.RedisAddr(b))
	dlocktest.BenchUncontended(b, newLocker(b, c), ping(c))
}

func BenchmarkContended(b *testing.B) {
	addr := testenv.RedisAddr(b)
	// Own connections, like processes.
	dlocktest.BenchContended(b, func(b *testing.B) dlock.Locker { return newLocker(b, benchClient(b, addr)) }, ping(benchClient(b, addr)))
}

// BenchmarkContendedFair is W2 on the fair lock (the "fair" rows),
// beside BenchmarkContended.
func BenchmarkContendedFair(b *testing.B) {
	addr := testenv.RedisAddr(b)
	b.Run("fair", func(b *testing.B) {
		dlocktest.BenchContended(b, func(b *testing.B) dlock.Locker { return newFair(b, benchClient(b, addr)) }, ping(benchClient(b, addr)))
	})
}

// commandCount sums the client-issued commands of INFO commandstats.
func commandCount(c *redis.Client) dlocktest.Requests {
	return func(ctx context.Context) (int64, error) {
		calls, err := serverCalls(ctx, c)
		if err != nil {
			return 0, err
		}
		return clientCommands(calls), nil
	}
}

// BenchmarkSeckill is W3 through the lock and the fair lock, each one
// Locker shared by the buyers; stock and orders are in PostgreSQL.
func BenchmarkSeckill(b *testing.B) {
	addr := testenv.RedisAddr(b)
	db := testenv.SaleDB(b, testenv.Postgres)
	b.Run("lock", func(b *testing.B) { testenv.BenchSeckill(b, newLocker(b, benchClient(b, addr)), db) })
	b.Run("fair", func(b *testing.B) { testenv.BenchSeckill(b, newFair(b, benchClient(b, addr)), db) })
}

func BenchmarkHerd(b *testing.B) {
	for _, kind := range []string{"lock", "fair"} {
		b.Run(kind, func(b *testing.B) {
			srv := testenv.RedisServers(b, 1)[0] // nothing else counts here
			mk := func() dlock.Locker {
				if kind == "fair" {
					return newFair(b, benchClient(b, srv.Addr))
				}
				return newLocker(b, benchClient(b, srv.Addr))
			}
			waiters := make([]dlock.Locker, 64)
			for i := range waiters {
				waiters[i] = mk()
			}
			dlocktest.BenchHerd(b, mk(), waiters, commandCount(benchClient(b, srv.Addr)))
		})
	}
}

// benchClient is the client the benchmarks give dlock: with
// ContextTimeoutEnabled, as the package doc advises, so that dlock makes
// its requests on the caller's goroutine (driver.DeadlineBound). The
// peers keep go-redis's defaults (client), which suit them better: with
// ContextTimeoutEnabled, go-redis sets each command's deadlines from ctx,
// and redsync's cycle grew by about a sixth.
func benchClient(b *testing.B, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	return c
}

// BenchmarkUncontendedTelemetry is W1 with OpenTelemetry off (the global
// no-op providers) and on (an SDK meter provider and a tracer provider
// batching every span to an exporter that drops them), side by side.
func BenchmarkUncontendedTelemetry(b *testing.B) {
	c := benchClient(b, testenv.RedisAddr(b))
	b.Run("off", func(b *testing.B) { dlocktest.BenchUncontended(b, newLocker(b, c), ping(c)) })
	b.Run("on", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		defer mp.Shutdown(context.Background())
		defer tp.Shutdown(context.Background())
		dlocktest.BenchUncontended(b, newLocker(b, c, dlock.WithMeterProvider(mp), dlock.WithTracerProvider(tp)), ping(c))
	})
}
