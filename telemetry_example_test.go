package dlock_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memlock"
)

// Lock metrics on a Prometheus /metrics page: an OpenTelemetry meter
// provider with the Prometheus exporter, given to the Locker (or set as
// the global provider, which every Locker uses by default). Here the
// Locker is the in-memory one; a tablelock, Redis or etcd Locker reports
// the same metrics, with its own dlock.backend and db.system.name.
func ExampleWithMeterProvider() {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())

	locker, err := memlock.NewLocker(memlock.NewServer(), dlock.WithMeterProvider(mp),
		// A few series per kind of name, not one per name.
		dlock.WithNameTemplate(func(name string) string {
			kind, _, _ := strings.Cut(name, ":")
			return kind
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(context.Background())
	ctx := context.Background()
	for _, name := range []string{"invoice:1", "invoice:2"} {
		lease, err := locker.Lock(ctx, name)
		if err != nil {
			log.Fatal(err)
		}
		_ = lease.Unlock(ctx)
	}

	families, err := registry.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "dlock_lock_acquisitions_total" {
			for _, m := range f.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				fmt.Println(f.GetName(), labels["dlock_name"], labels["dlock_outcome"], m.GetCounter().GetValue())
			}
		}
	}
	// Output:
	// dlock_lock_acquisitions_total invoice acquired 2
}
