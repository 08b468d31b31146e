package dlock_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/election"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/memlock"
	"github.com/dlockhq/dlock/schedlock"
)

// scrape exercises a Locker, an election and a scheduled job on a
// Prometheus exporter, as the example does, and returns what a scrape
// of it shows.
func scrape(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		t.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	t.Cleanup(func() { mp.Shutdown(context.Background()) })
	server := memlock.NewServer()
	l, err := memlock.NewLocker(server, dlock.WithMeterProvider(mp), dlock.WithTTL(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	ctx := context.Background()
	// Waits of about 20 ms: one holder, ten waiters in turn.
	held, err := l.Lock(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 10)
	for range 10 {
		go func() {
			lease, err := l.Lock(ctx, "w")
			if err == nil {
				time.Sleep(2 * time.Millisecond)
				err = lease.Unlock(ctx)
			}
			done <- err
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	lost, err := l.Lock(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // a renewal or two
	server.Expire("lost")
	<-lost.Done()
	// A release the server does not answer is retried in the background.
	pending, err := l.Lock(ctx, "pending")
	if err != nil {
		t.Fatal(err)
	}
	server.Down(errors.New("down"))
	uctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	_ = pending.Unlock(uctx)
	cancel()
	time.Sleep(20 * time.Millisecond)
	server.Down(nil)
	e, err := election.New(l, "leaders")
	if err != nil {
		t.Fatal(err)
	}
	lead, err := e.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	deposed, err := election.New(l, "deposed")
	if err != nil {
		t.Fatal(err)
	}
	gone, err := deposed.Campaign(ctx, "me")
	if err != nil {
		t.Fatal(err)
	}
	server.Expire("deposed")
	<-gone.Done()
	r, err := schedlock.New(l)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Run(ctx, "job", func(context.Context, uint64) error { return errors.New("failed") }, time.Minute, 0)
	_ = r.Run(ctx, "job", func(context.Context, uint64) error { return nil }, time.Minute, 0)
	if err := r.Run(ctx, "slow", func(ctx context.Context, _ uint64) error { <-ctx.Done(); return nil }, 400*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	_ = lead // leading at the scrape
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, f := range families {
		byName[f.GetName()] = f
	}
	return byName
}

// labels are the dlock labels the rules and the dashboard may use.
var labels = []string{"dlock_backend", "dlock_cause", "dlock_result", "dlock_outcome", "dlock_election", "dlock_job", "dlock_call", "dlock_end", "dlock_name"}

// metricNames are the dlock metric names in text (PromQL), without a
// histogram series' suffix.
func metricNames(text string) []string {
	var names []string
	for _, n := range regexp.MustCompile(`\bdlock_[a-z_]+`).FindAllString(text, -1) {
		if slices.Contains(labels, n) {
			continue
		}
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			n = strings.TrimSuffix(n, suffix)
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// The alerting rules and the dashboard in docs/ use only metrics a scrape
// of a real exporter shows, with the labels they group by; promtool
// accepts the rules; and a p99 computed from the wait buckets, as
// histogram_quantile does, is the waits the test made.
func TestAlertRules(t *testing.T) {
	families := scrape(t)
	rules, err := os.ReadFile("docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var dashboard struct {
		Panels []struct {
			Targets []struct{ Expr string } `json:"targets"`
		} `json:"panels"`
	}
	raw, err := os.ReadFile("docs/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &dashboard); err != nil {
		t.Fatalf("docs/grafana-dashboard.json: %v", err)
	}
	exprs := string(rules)
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			exprs += "\n" + target.Expr
		}
	}
	names := metricNames(exprs)
	if len(names) < 12 {
		t.Fatalf("only %d metric names in the rules and the dashboard: %v", len(names), names)
	}
	for _, n := range names {
		if families[n] == nil {
			var have []string
			for k := range families {
				if strings.HasPrefix(k, "dlock") {
					have = append(have, k)
				}
			}
			slices.Sort(have)
			t.Errorf("%s is in docs/ but not in a scrape; the scrape has %v", n, have)
		}
	}
	for _, label := range regexp.MustCompile(`\bdlock_(backend|cause|result|outcome|election|job)\b`).FindAllString(exprs, -1) {
		if !slices.Contains(labels, label) {
			continue
		}
		found := false
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == label
				}
			}
		}
		if !found {
			t.Errorf("label %s is in docs/ but on no scraped series", label)
		}
	}
	p99 := quantile(t, families["dlock_lock_wait_duration_seconds"], 0.99)
	t.Logf("histogram_quantile(0.99, sum by (le) (rate(dlock_lock_wait_duration_seconds_bucket[5m]))) over the scrape: %.3fs", p99)
	if p99 < 0.005 || p99 > 1 {
		t.Errorf("p99 wait from the buckets: %vs, want the test's ~20-40 ms waits (between 5 ms and 1 s)", p99)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if testenv.Required() {
			t.Fatalf("promtool (Debian's prometheus package; scripts/services.sh promtool): %v", err)
		}
		t.Skip("no promtool: scripts/services.sh promtool installs it")
	}
	if out, err := exec.Command(promtool, "check", "rules", "docs/alerts.yml").CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules docs/alerts.yml: %v\n%s", err, out)
	}
}

// quantile is histogram_quantile(q) over f's buckets, summed over its
// series: linear within the bucket the rank falls in.
func quantile(t *testing.T, f *dto.MetricFamily, q float64) float64 {
	t.Helper()
	if f == nil {
		t.Fatal("no wait histogram in the scrape")
	}
	counts := map[float64]uint64{}
	var total uint64
	for _, m := range f.GetMetric() {
		h := m.GetHistogram()
		total += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			counts[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	var bounds []float64
	for b := range counts {
		bounds = append(bounds, b)
	}
	slices.Sort(bounds)
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for _, b := range bounds {
		if float64(counts[b]) >= rank {
			return lower + (b-lower)*(rank-float64(below))/float64(counts[b]-below)
		}
		lower, below = b, counts[b]
	}
	return lower
}
