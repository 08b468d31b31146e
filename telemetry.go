package dlock

import (
	"context"
	"errors"
	"path"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/dlockhq/dlock/driver"
)

// DurationBuckets are the bucket boundaries, in seconds, of dlock's
// duration histograms (dlock.lock.wait.duration, dlock.lock.hold.duration):
// from a millisecond, where an uncontended lock's round trip falls, to an
// hour, where a long job's hold does, so that a p99 can be computed at
// every scale. OpenTelemetry's default boundaries are for milliseconds
// (0, 5, 10, … 10000): in seconds, everything under 5 s fell in one
// bucket. A View can replace them.
var DurationBuckets = []float64{
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
}

// Telemetry: OpenTelemetry metrics and spans, kept here once, so every
// backend and everything built on a Client (semaphores, latches,
// election, schedlock) has them.
//
// Metrics (attributes: dlock.backend, the backend's package; db.system.name
// where the backend names its server; dlock.name only with WithNameTemplate):
//
//	dlock.lock.wait.duration      histogram, s: Lock and TryLock calls, by dlock.outcome
//	dlock.lock.acquisitions       counter: the same calls, by dlock.outcome
//	                              (acquired, not_acquired, held_back: a restarted server held
//	                              the grant back, see ErrHeldBack; ctx_ended, error) and dlock.call
//	dlock.lock.hold.duration      histogram, s: holds, from the grant to their end, by dlock.end
//	                              (released, lost, closed)
//	dlock.lease.lost              counter: leases lost, by dlock.cause (not_held: the server
//	                              says the hold is gone; deadline: no renewal confirmed it in
//	                              time; session: the backend reported it lost)
//	dlock.lease.renewals          counter: renewals, by dlock.result (ok, failed)
//	dlock.lock.waiters            up-down counter: Lock calls waiting
//	dlock.lock.holders            up-down counter: holds held
//	dlock.releases.pending        up-down counter: releases retried in the background
//
// Spans: dlock.Lock and dlock.TryLock (the call, with its wait; its ctx
// goes on to the backend, so an instrumented driver's spans nest in it),
// dlock.hold (a hold, from its grant to its end), dlock.renew and
// dlock.Unlock.
const instrumentation = "github.com/dlockhq/dlock"

// Attribute keys.
const (
	attrBackend = attribute.Key("dlock.backend")
	attrSystem  = attribute.Key("db.system.name")
	attrName    = attribute.Key("dlock.name")
	attrOutcome = attribute.Key("dlock.outcome")
	attrCall    = attribute.Key("dlock.call")
	attrEnd     = attribute.Key("dlock.end")
	attrCause   = attribute.Key("dlock.cause")
	attrResult  = attribute.Key("dlock.result")
	attrToken   = attribute.Key("dlock.token")
)

// telemetry is a Client's instruments.
type telemetry struct {
	tracer       trace.Tracer
	wait, hold   metric.Float64Histogram
	acquisitions metric.Int64Counter
	lost         metric.Int64Counter
	renewals     metric.Int64Counter
	waiters      metric.Int64UpDownCounter
	holders      metric.Int64UpDownCounter
	pending      metric.Int64UpDownCounter
	backend      any // the driver.Backend, or the primitive (see Meter)
	kind         string
	names        func(string) string
	// global says the spans go to OpenTelemetry's global provider, which
	// records nothing until the application sets one (see tracing).
	global bool
}

// unsetTracerProvider is OpenTelemetry's global provider before the
// application sets one: it records nothing.
var unsetTracerProvider = otel.GetTracerProvider()

// noSpan is the span of a call whose spans nobody records.
var noSpan = trace.SpanFromContext(context.Background())

// tracing reports whether t's spans may be recorded: starting one costs
// allocations even when nobody records it.
func (t *telemetry) tracing() bool {
	return !t.global || otel.GetTracerProvider() != unsetTracerProvider
}

// start starts a span named name, or returns noSpan when nobody records
// spans.
func (t *telemetry) start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if !t.tracing() {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind))
}

func newTelemetry(cfg Config, b any) *telemetry {
	mp, tp := cfg.MeterProvider, cfg.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	global := tp == nil
	if global {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(instrumentation)
	t := &telemetry{tracer: tp.Tracer(instrumentation), backend: b, kind: backendKind(b), names: cfg.NameTemplate, global: global}
	// An instrument that cannot be made (a bad name or unit, which these
	// are not) is a no-op one: telemetry never stops a lock.
	t.wait, _ = m.Float64Histogram("dlock.lock.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long Lock and TryLock calls took, by outcome."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	t.hold, _ = m.Float64Histogram("dlock.lock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("How long holds lasted, from their grant to their end."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...))
	t.acquisitions, _ = m.Int64Counter("dlock.lock.acquisitions", metric.WithUnit("{call}"),
		metric.WithDescription("Lock and TryLock calls, by outcome."))
	t.lost, _ = m.Int64Counter("dlock.lease.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost before Unlock, by cause."))
	t.renewals, _ = m.Int64Counter("dlock.lease.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Lease renewals, by result."))
	t.waiters, _ = m.Int64UpDownCounter("dlock.lock.waiters", metric.WithUnit("{call}"),
		metric.WithDescription("Lock calls waiting."))
	t.holders, _ = m.Int64UpDownCounter("dlock.lock.holders", metric.WithUnit("{hold}"),
		metric.WithDescription("Holds held."))
	t.pending, _ = m.Int64UpDownCounter("dlock.releases.pending", metric.WithUnit("{release}"),
		metric.WithDescription("Releases retried in the background."))
	return t
}

// backendKind is the last element of b's package path: tablelock, redis,
// zk, etcd, memlock.
func backendKind(b any) string {
	t := reflect.TypeOf(b)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return path.Base(t.PkgPath())
}

// attrs are the attributes of a name's measurements, then extra.
func (t *telemetry) attrs(name string, extra ...attribute.KeyValue) metric.MeasurementOption {
	kv := make([]attribute.KeyValue, 0, 3+len(extra))
	kv = append(kv, attrBackend.String(t.kind))
	if s, ok := t.backend.(driver.DBSystem); ok {
		if sys := s.DBSystem(); sys != "" {
			kv = append(kv, attrSystem.String(sys))
		}
	}
	if t.names != nil {
		kv = append(kv, attrName.String(t.names(name)))
	}
	return metric.WithAttributes(append(kv, extra...)...)
}

// call is one Lock or TryLock being measured.
type call struct {
	t     *telemetry
	name  string
	kind  string
	start time.Time
	span  trace.Span
	wait  bool
}

// startCall starts measuring a Lock (wait) or TryLock of name; ctx is the
// call's, with its span.
func (t *telemetry) startCall(ctx context.Context, name string, wait bool) (context.Context, call) {
	kind := "TryLock"
	if wait {
		kind = "Lock"
	}
	return t.startNamed(ctx, name, kind, wait)
}

// startNamed starts measuring a call of the given kind (Lock, TryLock,
// Acquire, TryAcquire).
func (t *telemetry) startNamed(ctx context.Context, name, kind string, wait bool) (context.Context, call) {
	ctx, span := t.start(ctx, "dlock."+kind, trace.SpanKindClient)
	c := call{t: t, name: name, kind: kind, start: time.Now(), span: span, wait: wait}
	if span.IsRecording() {
		span.SetAttributes(attrBackend.String(t.kind))
		if t.names != nil {
			span.SetAttributes(attrName.String(t.names(name)))
		}
	}
	if wait && t.waiters.Enabled(ctx) {
		t.waiters.Add(ctx, 1, t.attrs(name))
	}
	return ctx, c
}

// end records the call's outcome: l, or err.
func (c call) end(ctx context.Context, l Lease, err error) {
	var token uint64
	if l != nil {
		token = l.Token()
	}
	c.endToken(ctx, token, err)
}

// endToken is end for a grant with token (0: none).
func (c call) endToken(ctx context.Context, token uint64, err error) {
	t := c.t
	outcome := outcomeOf(ctx, err)
	if c.wait && t.waiters.Enabled(ctx) {
		t.waiters.Add(ctx, -1, t.attrs(c.name))
	}
	if t.wait.Enabled(ctx) || t.acquisitions.Enabled(ctx) {
		opt := t.attrs(c.name, attrOutcome.String(outcome), attrCall.String(c.kind))
		t.wait.Record(ctx, time.Since(c.start).Seconds(), opt)
		t.acquisitions.Add(ctx, 1, opt)
	}
	if c.span.IsRecording() {
		c.span.SetAttributes(attrOutcome.String(outcome))
		if token != 0 {
			c.span.SetAttributes(attrToken.Int64(int64(token)))
		}
	}
	if outcome == "error" {
		endSpan(c.span, err)
		return
	}
	c.span.End()
}

// outcomeOf is the outcome of a Lock or TryLock that returned err.
func outcomeOf(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return "acquired"
	case errors.Is(err, ErrHeldBack):
		return "held_back"
	case ctx.Err() != nil:
		return "ctx_ended"
	case errors.Is(err, ErrNotAcquired):
		return "not_acquired"
	}
	return "error"
}

// holdSpan is a hold's measurement, from its grant; the zero value for
// a hold not measured, or measured already.
type holdSpan struct {
	start time.Time
	span  trace.Span
}

// holdStarts starts measuring a hold of name with token.
func (t *telemetry) holdStarts(name string, token uint64) holdSpan {
	ctx := context.Background()
	if t.holders.Enabled(ctx) {
		t.holders.Add(ctx, 1, t.attrs(name))
	}
	_, span := t.start(ctx, "dlock.hold", trace.SpanKindInternal)
	if span.IsRecording() {
		span.SetAttributes(attrBackend.String(t.kind), attrToken.Int64(int64(token)))
		if t.names != nil {
			span.SetAttributes(attrName.String(t.names(name)))
		}
	}
	return holdSpan{start: time.Now(), span: span}
}

// measuredEnd takes h's measurement out, under c.mu, for holdEnds to
// record once c.mu is let go: an exporter (a synchronous span processor)
// must never hold up the Client's lock, which a watchdog takes to close
// another hold's Done.
func measuredEnd(h *hold) holdSpan {
	m := h.measured
	h.measured = holdSpan{}
	return m
}

// holdEnds records the end of the hold of name that m measures, once.
func (t *telemetry) holdEnds(name string, m *holdSpan, end string) {
	if m.span == nil {
		return
	}
	start, span := m.start, m.span
	*m = holdSpan{}
	ctx := context.Background()
	if t.holders.Enabled(ctx) {
		t.holders.Add(ctx, -1, t.attrs(name))
	}
	if t.hold.Enabled(ctx) {
		t.hold.Record(ctx, time.Since(start).Seconds(), t.attrs(name, attrEnd.String(end)))
	}
	if span.IsRecording() {
		span.SetAttributes(attrEnd.String(end))
	}
	span.End()
}

// leaseLost counts a lease of name lost for cause.
func (t *telemetry) leaseLost(name, cause string) {
	ctx := context.Background()
	if t.lost.Enabled(ctx) {
		t.lost.Add(ctx, 1, t.attrs(name, attrCause.String(cause)))
	}
}

// renewal measures one renewal of h: run makes it.
func (t *telemetry) renewal(h *hold, run func(ctx context.Context) error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		ctx, span := t.start(ctx, "dlock.renew", trace.SpanKindClient)
		err := run(ctx)
		result := "ok"
		if err != nil {
			result = "failed"
		}
		endSpan(span, err)
		if t.renewals.Enabled(ctx) {
			t.renewals.Add(ctx, 1, t.attrs(h.Name, attrResult.String(result)))
		}
		return err
	}
}

// Meter measures a primitive whose holds are not a Client's (a backend
// package's semaphore) with the metrics and spans of locks: its
// Acquire and TryAcquire calls as dlock.lock.acquisitions and
// dlock.lock.wait.duration (dlock.call Acquire, TryAcquire), its permits
// as holds, their Release as a dlock.Release span. Backend packages make
// one per primitive, from the primitive's Config.
type Meter struct {
	t    *telemetry
	name string
}

// NewMeter returns the Meter of primitive (its package is dlock.backend)
// of the given name, reporting where cfg says (WithMeterProvider,
// WithTracerProvider, WithNameTemplate).
func NewMeter(cfg Config, primitive any, name string) *Meter {
	return &Meter{t: newTelemetry(cfg, primitive), name: name}
}

// Acquire measures one acquisition: acquire makes it (with the ctx it is
// given, which carries the call's span) and returns the grant's token, 0
// when it failed. The HoldMeter measures the hold it granted; nil when
// it failed.
func (m *Meter) Acquire(ctx context.Context, wait bool, acquire func(ctx context.Context) (uint64, error)) (*HoldMeter, error) {
	kind := "TryAcquire"
	if wait {
		kind = "Acquire"
	}
	ctx, c := m.t.startNamed(ctx, m.name, kind, wait)
	token, err := acquire(ctx)
	c.endToken(ctx, token, err)
	if err != nil {
		return nil, err
	}
	return &HoldMeter{m: m, hold: m.t.holdStarts(m.name, token)}, nil
}

// HoldMeter measures one hold a Meter's Acquire granted.
type HoldMeter struct {
	m    *Meter
	mu   sync.Mutex
	hold holdSpan
}

// Release measures release, which gives the hold back; the hold ends
// then, whatever release returns. A nil HoldMeter only runs release.
func (h *HoldMeter) Release(ctx context.Context, release func(ctx context.Context) error) error {
	if h == nil {
		return release(ctx)
	}
	t := h.m.t
	ctx, span := t.start(ctx, "dlock.Release", trace.SpanKindClient)
	err := release(ctx)
	endSpan(span, err)
	h.mu.Lock()
	t.holdEnds(h.m.name, &h.hold, "released")
	h.mu.Unlock()
	return err
}

// unlockSpan starts an Unlock's span.
func (t *telemetry) unlockSpan(ctx context.Context) (context.Context, trace.Span) {
	ctx, span := t.start(ctx, "dlock.Unlock", trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(attrBackend.String(t.kind))
	}
	return ctx, span
}

// endSpan ends span, with err as its status when not nil.
func endSpan(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// releasePending counts a background release starting (1) or done (-1).
func (t *telemetry) releasePending(name string, n int64) {
	ctx := context.Background()
	if t.pending.Enabled(ctx) {
		t.pending.Add(ctx, n, t.attrs(name))
	}
}
