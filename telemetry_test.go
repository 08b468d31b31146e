package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memlock"
)

// measured is a Locker with an OpenTelemetry SDK behind its metrics and
// spans.
type measured struct {
	l      *memlock.Locker
	server *memlock.Server
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

func newMeasured(t *testing.T, opts ...dlock.Option) *measured {
	t.Helper()
	m := &measured{server: memlock.NewServer(), reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(m.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(m.spans))
	t.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = tp.Shutdown(context.Background())
	})
	l, err := memlock.NewLocker(m.server, append([]dlock.Option{dlock.WithMeterProvider(mp), dlock.WithTracerProvider(tp)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	m.l = l
	return m
}

// point is one data point of a metric: its attributes and its value (a
// sum's, or a histogram's count).
type point struct {
	attrs attribute.Set
	value int64
}

// points reads metric name's data points.
func (m *measured) points(t *testing.T, name string) []point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var ps []point
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name != name {
				continue
			}
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					ps = append(ps, point{p.Attributes, p.Value})
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					ps = append(ps, point{p.Attributes, int64(p.Count)})
				}
			}
		}
	}
	return ps
}

// value is the value of metric name's point whose attributes include kv
// (summed over the points that match).
func (m *measured) value(t *testing.T, name string, kv ...attribute.KeyValue) int64 {
	t.Helper()
	var n int64
	for _, p := range m.points(t, name) {
		match := true
		for _, want := range kv {
			if got, ok := p.attrs.Value(want.Key); !ok || got != want.Value {
				match = false
			}
		}
		if match {
			n += p.value
		}
	}
	return n
}

func (m *measured) spanNames() []string {
	var names []string
	for _, s := range m.spans.Ended() {
		names = append(names, s.Name())
	}
	return names
}

func TestTelemetryCountsEachOutcome(t *testing.T) {
	m := newMeasured(t)
	ctx := context.Background()
	lease, err := m.l.Lock(ctx, "invoice:1")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.value(t, "dlock.lock.holders"); got != 1 {
		t.Errorf("holders while held: %d, want 1", got)
	}
	// A second call chain of the same Locker: TryLock says no, a Lock
	// whose ctx ends gives up.
	if _, err := m.l.TryLock(ctx, "invoice:1"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a held name: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	if _, err := m.l.Lock(wctx, "invoice:1"); err == nil {
		t.Fatal("Lock of a held name succeeded")
	}
	cancel()
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		outcome, call string
		want          int64
	}{{"acquired", "Lock", 1}, {"not_acquired", "TryLock", 1}, {"ctx_ended", "Lock", 1}, {"error", "Lock", 0}} {
		kv := []attribute.KeyValue{attribute.String("dlock.outcome", c.outcome), attribute.String("dlock.call", c.call)}
		if got := m.value(t, "dlock.lock.acquisitions", kv...); got != c.want {
			t.Errorf("acquisitions %s/%s: %d, want %d", c.call, c.outcome, got, c.want)
		}
		if got := m.value(t, "dlock.lock.wait.duration", kv...); got != c.want {
			t.Errorf("wait.duration count %s/%s: %d, want %d", c.call, c.outcome, got, c.want)
		}
	}
	for metric, want := range map[string]int64{"dlock.lock.holders": 0, "dlock.lock.waiters": 0} {
		if got := m.value(t, metric); got != want {
			t.Errorf("%s after everything ended: %d, want %d", metric, got, want)
		}
	}
	if got := m.value(t, "dlock.lock.hold.duration", attribute.String("dlock.end", "released")); got != 1 {
		t.Errorf("hold.duration count for released holds: %d, want 1", got)
	}
	// Every point says which backend; none names the lock.
	for _, p := range m.points(t, "dlock.lock.acquisitions") {
		if v, ok := p.attrs.Value("dlock.backend"); !ok || v.AsString() != "memlock" {
			t.Errorf("dlock.backend %v, want memlock", v.AsString())
		}
		if _, ok := p.attrs.Value("dlock.name"); ok {
			t.Error("a point names the lock without WithNameTemplate")
		}
	}
	names := strings.Join(m.spanNames(), " ")
	for _, want := range []string{"dlock.Lock", "dlock.TryLock", "dlock.hold", "dlock.Unlock"} {
		if !strings.Contains(names, want) {
			t.Errorf("spans %q lack %s", names, want)
		}
	}
}

func TestTelemetryCountsLossesAndRenewals(t *testing.T) {
	m := newMeasured(t, dlock.WithTTL(300*time.Millisecond))
	ctx := context.Background()
	// Renewals that fail past the deadline lose the lease: a deadline loss.
	m.server.FailRenewals("a", 100, nil)
	lease, err := m.l.Lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	<-lease.Done()
	// The server ends a hold: a session loss.
	lease, err = m.l.Lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if !m.server.Expire("b") {
		t.Fatal("b was not held")
	}
	<-lease.Done()
	// A hold that lasts a few renewals.
	lease, err = m.l.Lock(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(350 * time.Millisecond)
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if got := m.value(t, "dlock.lease.lost", attribute.String("dlock.cause", "deadline")); got != 1 {
		t.Errorf("leases lost at their deadline: %d, want 1", got)
	}
	if got := m.value(t, "dlock.lease.lost", attribute.String("dlock.cause", "session")); got != 1 {
		t.Errorf("leases the backend reported lost: %d, want 1", got)
	}
	if got := m.value(t, "dlock.lease.renewals", attribute.String("dlock.result", "failed")); got < 1 {
		t.Errorf("failed renewals: %d, want some", got)
	}
	if got := m.value(t, "dlock.lease.renewals", attribute.String("dlock.result", "ok")); got < 2 {
		t.Errorf("renewals of a hold that lasted more than a TTL: %d, want 2 or more", got)
	}
	if got := m.value(t, "dlock.lock.hold.duration", attribute.String("dlock.end", "lost")); got != 2 {
		t.Errorf("hold.duration count for lost holds: %d, want 2", got)
	}
	if got := m.value(t, "dlock.lock.holders"); got != 0 {
		t.Errorf("holders after every hold ended: %d, want 0", got)
	}
}

func TestTelemetryNameTemplate(t *testing.T) {
	m := newMeasured(t, dlock.WithNameTemplate(func(name string) string {
		prefix, _, _ := strings.Cut(name, ":")
		return prefix + ":*"
	}))
	ctx := context.Background()
	for _, name := range []string{"invoice:1", "invoice:2", "user:7"} {
		lease, err := m.l.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.value(t, "dlock.lock.acquisitions", attribute.String("dlock.name", "invoice:*")); got != 2 {
		t.Errorf("acquisitions of invoice:*: %d, want 2", got)
	}
	if got := len(m.points(t, "dlock.lock.acquisitions")); got != 2 {
		t.Errorf("%d series for three names under two templates, want 2", got)
	}
}

// What telemetry costs a lock and unlock on the in-memory backend, where
// nothing else hides it: off (OpenTelemetry's global providers, unset)
// and on (the SDK recording every metric and span).
//
//	go test -run '^$' -bench Telemetry -count 5 .
func BenchmarkTelemetry(b *testing.B) {
	run := func(b *testing.B, opts ...dlock.Option) {
		l, err := memlock.NewLocker(memlock.NewServer(), opts...)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close(context.Background())
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			lease, err := l.Lock(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			if err := lease.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("off", func(b *testing.B) { run(b) })
	b.Run("on", func(b *testing.B) {
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
		defer mp.Shutdown(context.Background())
		defer tp.Shutdown(context.Background())
		run(b, dlock.WithMeterProvider(mp), dlock.WithTracerProvider(tp))
	})
}

// stallingProcessor holds up the export of every span of a released
// hold until release closes: a synchronous exporter stuck on a slow
// collector.
type stallingProcessor struct {
	sdktrace.SpanProcessor
	release chan struct{}
}

func (p stallingProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, kv := range s.Attributes() {
		if kv.Key == "dlock.end" && kv.Value.AsString() == "released" {
			<-p.release
		}
	}
}

// A stuck span exporter never holds up the lease rule: while one hold's
// span waits to be exported, another hold of the same Locker whose
// renewals fail still loses its lease at its deadline.
func TestStuckExporterDoesNotDelayLeaseLoss(t *testing.T) {
	stall := stallingProcessor{SpanProcessor: tracetest.NewSpanRecorder(), release: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(stall))
	released := false
	defer func() {
		if !released {
			close(stall.release)
		}
	}()
	server := memlock.NewServer()
	l, err := memlock.NewLocker(server, dlock.WithTracerProvider(tp), dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	server.FailRenewals("failing", 100, nil)
	failing, err := l.Lock(ctx, "failing")
	if err != nil {
		t.Fatal(err)
	}
	other, err := l.Lock(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = other.Unlock(ctx) }() // its span's export stalls
	select {
	case <-failing.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("a lease whose renewals failed was still open 2 s after its 300 ms deadline, behind a stuck span export")
	}
	close(stall.release)
	released = true
	_ = l.Close(ctx)
}

// The duration histograms have second-scale buckets: a fast Lock lands
// in a bucket below 100 ms, so a p99 alert can tell 1 ms from 4 s.
func TestDurationBucketsAreSeconds(t *testing.T) {
	m := newMeasured(t)
	lease, err := m.l.Lock(context.Background(), "invoice:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := m.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			h, ok := mt.Data.(metricdata.Histogram[float64])
			if !ok {
				continue
			}
			for _, p := range h.DataPoints {
				seen++
				if !slices.Equal(p.Bounds, dlock.DurationBuckets) {
					t.Errorf("%s bounds %v, want dlock.DurationBuckets", mt.Name, p.Bounds)
					continue
				}
				i := slices.IndexFunc(p.BucketCounts, func(n uint64) bool { return n > 0 })
				if i < 0 || p.Bounds[min(i, len(p.Bounds)-1)] > 0.1 {
					t.Errorf("%s: a memlock call fell in bucket %d of %v (counts %v), want one under 100 ms", mt.Name, i, p.Bounds, p.BucketCounts)
				}
			}
		}
	}
	if seen < 2 {
		t.Fatalf("%d histogram points, want the wait and the hold", seen)
	}
}
