package redislock_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// A semaphore, which is not built on dlock.Client, reports its
// acquisitions and permits as a Locker reports locks.
func TestSemaphoreTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	s, err := redislock.NewSemaphore(client(t, testenv.RedisAddr(t)), dlocktest.Name(t), 1, dlock.WithMeterProvider(mp))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	p, err := s.TryAcquire(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a full semaphore: %v", err)
	}
	value := func(name string, kv ...attribute.KeyValue) int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				match := func(set attribute.Set) bool {
					for _, want := range kv {
						if got, ok := set.Value(want.Key); !ok || got != want.Value {
							return false
						}
					}
					return true
				}
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, p := range d.DataPoints {
						if match(p.Attributes) {
							n += p.Value
						}
					}
				case metricdata.Histogram[float64]:
					for _, p := range d.DataPoints {
						if match(p.Attributes) {
							n += int64(p.Count)
						}
					}
				}
			}
		}
		return n
	}
	if got := value("dlock.lock.holders"); got != 1 {
		t.Errorf("holders with a permit out: %d, want 1", got)
	}
	if err := p.Release(ctx); err != nil {
		t.Fatal(err)
	}
	call := attribute.String("dlock.call", "TryAcquire")
	if got := value("dlock.lock.acquisitions", call, attribute.String("dlock.outcome", "acquired")); got != 1 {
		t.Errorf("acquired: %d, want 1", got)
	}
	if got := value("dlock.lock.acquisitions", call, attribute.String("dlock.outcome", "not_acquired"), attribute.String("dlock.backend", "redis"),
		attribute.String("db.system.name", "redis")); got != 1 {
		t.Errorf("not acquired, from backend redis, db.system.name redis: %d, want 1", got)
	}
	if got := value("dlock.lock.holders"); got != 0 {
		t.Errorf("holders after the release: %d, want 0", got)
	}
	if got := value("dlock.lock.hold.duration", attribute.String("dlock.end", "released")); got != 1 {
		t.Errorf("holds released: %d, want 1", got)
	}
}
