package schedlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memlock"
	"github.com/dlockhq/dlock/schedlock"
)

// Runs are counted by result, lockAtMostFor hits apart, and the last
// success's time is a gauge.
func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	l, err := memlock.NewLocker(memlock.NewServer(), dlock.WithMeterProvider(mp), dlock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	r, err := schedlock.New(l)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before := time.Now()
	if err := r.Run(ctx, "report", func(context.Context, uint64) error { return nil }, time.Second, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Run(ctx, "report", func(context.Context, uint64) error { return errors.New("boom") }, time.Second, 0); err == nil {
		t.Fatal("the failing job's error was not returned")
	}
	if err := r.Run(ctx, "report", func(context.Context, uint64) error { return nil }, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	// lockAtLeastFor 1h: the next run is skipped.
	if err := r.Run(ctx, "report", func(context.Context, uint64) error { return nil }, time.Second, 0); !errors.Is(err, schedlock.ErrSkipped) {
		t.Fatalf("a run within lockAtLeastFor: %v", err)
	}
	if err := r.Run(ctx, "slow", func(ctx context.Context, _ uint64) error { <-ctx.Done(); return nil }, 300*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	runs := map[string]int64{}
	var atMost int64
	var last float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					job, _ := p.Attributes.Value("dlock.job")
					result, _ := p.Attributes.Value("dlock.result")
					switch m.Name {
					case "dlock.job.runs":
						runs[job.AsString()+"/"+result.AsString()] += p.Value
					case "dlock.job.lock_at_most_for":
						atMost += p.Value
					}
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					if job, _ := p.Attributes.Value("dlock.job"); m.Name == "dlock.job.last_success" && job.AsString() == "report" {
						last = p.Value
					}
				}
			}
		}
	}
	want := map[string]int64{"report/started": 3, "report/succeeded": 2, "report/failed": 1, "report/skipped": 1, "slow/started": 1, "slow/succeeded": 1}
	for k, v := range want {
		if runs[k] != v {
			t.Errorf("dlock.job.runs %s = %d, want %d (all: %v)", k, runs[k], v, runs)
		}
	}
	if atMost != 1 {
		t.Errorf("dlock.job.lock_at_most_for = %d, want 1 (the slow job)", atMost)
	}
	if at := time.UnixMilli(int64(last * 1e3)); at.Before(before.Add(-time.Second)) || at.After(time.Now()) {
		t.Errorf("dlock.job.last_success = %v, want the first run's end", at)
	}
}
