package schedlock

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/dlockhq/dlock"
)

// Metrics, on the Locker's MeterProvider (dlock.WithMeterProvider; the
// global one for a Locker that does not say), with attribute dlock.job,
// the job's name:
//
//	dlock.job.runs              counter, by dlock.result: started (this node
//	                            took the slot), skipped (the slot was taken),
//	                            succeeded, failed (the job returned an error,
//	                            under Run), lost (the run's lease was lost)
//	dlock.job.lock_at_most_for  counter: runs that lasted lockAtMostFor
//	dlock.job.last_success      gauge, s: when this node's last run of the
//	                            job succeeded, as a Unix time
//
// A run that Begin starts and End ends (the scheduler adapters) counts as
// succeeded when its lease held to End: the adapters do not see the job's
// error.
type metrics struct {
	runs        metric.Int64Counter
	atMostFor   metric.Int64Counter
	lastSuccess metric.Float64Gauge
}

const instrumentation = "github.com/dlockhq/dlock/schedlock"

func newMetrics(l dlock.Locker) *metrics {
	mp := otel.GetMeterProvider()
	if c, ok := l.(interface{ Config() dlock.Config }); ok && c.Config().MeterProvider != nil {
		mp = c.Config().MeterProvider
	}
	m := mp.Meter(instrumentation)
	runs, _ := m.Int64Counter("dlock.job.runs", metric.WithDescription("Runs of a scheduled job, by result."))
	atMostFor, _ := m.Int64Counter("dlock.job.lock_at_most_for", metric.WithDescription("Runs that lasted lockAtMostFor."))
	last, _ := m.Float64Gauge("dlock.job.last_success", metric.WithUnit("s"),
		metric.WithDescription("When this node's last run of the job succeeded, as a Unix time."))
	return &metrics{runs: runs, atMostFor: atMostFor, lastSuccess: last}
}

// run counts a run of job with result.
func (m *metrics) run(job, result string) {
	m.runs.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(
		attribute.String("dlock.job", job), attribute.String("dlock.result", result))))
}

// ended counts the end of s's run: whether it lasted lockAtMostFor, and
// its result.
func (m *metrics) ended(s *Slot, lost bool) {
	job := attribute.NewSet(attribute.String("dlock.job", s.name))
	if context.Cause(s.ctx) == ErrLockAtMostFor {
		m.atMostFor.Add(context.Background(), 1, metric.WithAttributeSet(job))
	}
	switch {
	case lost:
		m.run(s.name, "lost")
	case s.failed:
		m.run(s.name, "failed")
	default:
		m.run(s.name, "succeeded")
		m.lastSuccess.Record(context.Background(), float64(time.Now().UnixMilli())/1e3, metric.WithAttributeSet(job))
	}
}
