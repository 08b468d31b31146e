package election

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/dlockhq/dlock"
)

// Metrics, on the Locker's MeterProvider (dlock.WithMeterProvider; the
// global one for a Locker that does not say), with attribute
// dlock.election, the election's name:
//
//	dlock.election.leader   up-down counter: 1 while this process leads the
//	                        election, else 0 (client-go's
//	                        leader_election_master_status)
//	dlock.election.terms    counter: leaderships this process won
//	dlock.election.losses   counter: leaderships that ended without Resign
//	                        (the lease was lost)
type metrics struct {
	leader metric.Int64UpDownCounter
	terms  metric.Int64Counter
	losses metric.Int64Counter
	attrs  metric.MeasurementOption
}

const instrumentation = "github.com/dlockhq/dlock/election"

// meterOf is l's MeterProvider's meter, or the global one's.
func meterOf(l dlock.Locker) metric.Meter {
	mp := otel.GetMeterProvider()
	if c, ok := l.(interface{ Config() dlock.Config }); ok && c.Config().MeterProvider != nil {
		mp = c.Config().MeterProvider
	}
	return mp.Meter(instrumentation)
}

func newMetrics(l dlock.Locker, name string) *metrics {
	m := meterOf(l)
	leader, _ := m.Int64UpDownCounter("dlock.election.leader",
		metric.WithDescription("1 while this process leads the election, else 0."))
	terms, _ := m.Int64Counter("dlock.election.terms",
		metric.WithDescription("Leaderships this process won."))
	losses, _ := m.Int64Counter("dlock.election.losses",
		metric.WithDescription("Leaderships that ended without Resign: the lease was lost."))
	return &metrics{leader: leader, terms: terms, losses: losses,
		attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String("dlock.election", name)))}
}

// won counts l's term, and its end when it comes: a loss unless l resigned.
func (m *metrics) won(l *Leadership) {
	ctx := context.Background()
	m.leader.Add(ctx, 1, m.attrs)
	m.terms.Add(ctx, 1, m.attrs)
	context.AfterFunc(l.ctx, func() {
		m.leader.Add(ctx, -1, m.attrs)
		if context.Cause(l.ctx) != ErrResigned {
			m.losses.Add(ctx, 1, m.attrs)
		}
	})
}

// Health is a liveness check for a process that campaigns, as client-go's
// leader-election healthz adaptor is: it fails while this process leads
// and its lease has less than minLeft left before its deadline, which
// happens only when renewals are failing (a healthy lease is renewed every
// third of its TTL), so a supervisor can restart a leader that cannot
// keep its lease. Watch each Leadership the process wins. Its ServeHTTP
// answers 200 "ok", or 500 with why. The zero Health is not usable: make
// one with NewHealth.
type Health struct {
	minLeft time.Duration

	mu      sync.Mutex
	leading *Leadership
}

// NewHealth returns a Health that fails while a watched leader's lease
// has less than minLeft left (a third of the TTL is a good choice: a
// renewal is then overdue).
func NewHealth(minLeft time.Duration) (*Health, error) {
	if minLeft <= 0 {
		return nil, fmt.Errorf("election: NewHealth(%v): not positive", minLeft)
	}
	return &Health{minLeft: minLeft}, nil
}

// Watch makes l the leadership Check looks at, until it ends.
func (h *Health) Watch(l *Leadership) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leading = l
}

// Check returns nil unless the watched leadership is live and its lease
// has less than minLeft left.
func (h *Health) Check() error {
	h.mu.Lock()
	l := h.leading
	h.mu.Unlock()
	if l == nil || l.Err() != nil {
		return nil
	}
	left := time.Until(l.lease.Deadline())
	if left < h.minLeft {
		return fmt.Errorf("election %q: this process leads, and its lease has %v left (less than %v): renewals are failing", l.e.name, left.Round(time.Millisecond), h.minLeft)
	}
	return nil
}

// ServeHTTP answers 200 "ok", or 500 with Check's error.
func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if err := h.Check(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_, _ = w.Write([]byte("ok\n"))
}
