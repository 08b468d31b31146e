package election_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/election"
	"github.com/dlockhq/dlock/memlock"
)

// sum is the value of the int64 sum name for election e in rm.
func sum(t *testing.T, reader *sdkmetric.ManualReader, name, e string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, p := range d.DataPoints {
					if v, ok := p.Attributes.Value("dlock.election"); ok && v.AsString() == e {
						return p.Value
					}
				}
			}
		}
	}
	return 0
}

// The leader gauge is 1 while this process leads and 0 after; terms count
// wins, losses the leaderships that ended without Resign.
func TestMetrics(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	server := memlock.NewServer()
	l, err := memlock.NewLocker(server, dlock.WithMeterProvider(mp), dlock.WithTTL(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	e, err := election.New(l, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lead, err := e.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if got := sum(t, reader, "dlock.election.leader", "jobs"); got != 1 {
		t.Fatalf("leader while leading: %d, want 1", got)
	}
	if err := lead.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sum(t, reader, "dlock.election.leader", "jobs"); got != 0 {
		t.Fatalf("leader after Resign: %d, want 0", got)
	}
	lead, err = e.Campaign(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	server.Expire("jobs") // the lease is lost at its next renewal
	<-lead.Done()
	deadline := time.Now().Add(5 * time.Second)
	for sum(t, reader, "dlock.election.losses", "jobs") != 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if terms, losses, leader := sum(t, reader, "dlock.election.terms", "jobs"), sum(t, reader, "dlock.election.losses", "jobs"), sum(t, reader, "dlock.election.leader", "jobs"); terms != 2 || losses != 1 || leader != 0 {
		t.Fatalf("after a resign and a loss: terms %d, losses %d, leader %d; want 2, 1, 0", terms, losses, leader)
	}
}

// Health fails while the process leads with a lease whose renewals fail,
// and passes before, after the leadership ends, and while renewals work.
func TestHealth(t *testing.T) {
	server := memlock.NewServer()
	const ttl = 600 * time.Millisecond
	l, err := memlock.NewLocker(server, dlock.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	e, err := election.New(l, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	h, err := election.NewHealth(ttl / 3)
	if err != nil {
		t.Fatal(err)
	}
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, _ := get(); code != http.StatusOK {
		t.Fatalf("healthz before leading: %d", code)
	}
	lead, err := e.Campaign(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	h.Watch(lead)
	time.Sleep(ttl) // renewals work: never below a third left
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("healthz while renewing: %d %q", code, body)
	}
	server.FailRenewals("jobs", 100, errors.New("injected"))
	deadline := time.Now().Add(ttl)
	for h.Check() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if code, body := get(); code != http.StatusInternalServerError || !strings.Contains(body, "renewals are failing") {
		t.Fatalf("healthz while renewals fail: %d %q", code, body)
	}
	<-lead.Done()
	if code, body := get(); code != http.StatusOK {
		t.Fatalf("healthz after the leadership ended: %d %q", code, body)
	}
	if _, err := election.NewHealth(0); err == nil {
		t.Fatal("NewHealth(0) accepted")
	}
}
