package main

import (
	"strings"
	"testing"
)

// What the report says comes from the run's figures: the same code says
// opposite things of opposite runs.
func TestLessonsComeFromTheRun(t *testing.T) {
	o := options{db: "postgres", stock: 10, users: 20, buyers: 5, procs: 1}
	atomic := row{Strategy: "atomic", Orders: 10, OrdersPerS: 100, P50ms: 5, P99ms: 50}
	fast := row{Strategy: "redis", Orders: 10, OrdersPerS: 300, P50ms: 2, P99ms: 20}
	slow := row{Strategy: "optimistic", Orders: 10, OrdersPerS: 20, P50ms: 30, P99ms: 300}
	none := row{Strategy: "none", Orders: 20, StockLeft: 5, Oversold: 10, OrdersPerS: 400}
	short := row{Strategy: "zk", Orders: 9, StockLeft: 1, OrdersPerS: 100, P99ms: 10}

	got := strings.Join(lessons([]row{none, atomic, fast, slow, short}, o), "\n")
	for _, want := range []string{
		"none sold 20 units of a stock of 10",
		"Faster than the atomic UPDATE in this run: redis 3.0×",
		"Slower than the atomic UPDATE in this run: optimistic 0.20×",
		"A lower p99 than the atomic UPDATE's (50.0 ms): redis.",
		"zk was not exact: 9 orders, 1 left in stock",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("lessons lack %q:\n%s", want, got)
		}
	}
	// The other way round, the report says the other thing.
	fast.OrdersPerS, fast.P99ms = 50, 80
	got = strings.Join(lessons([]row{atomic, fast}, o), "\n")
	if strings.Contains(got, "Faster") || !strings.Contains(got, "Slower than the atomic UPDATE in this run: redis 0.50×") {
		t.Errorf("lessons of a run where redis lost:\n%s", got)
	}
	if strings.Contains(got, "lower p99") {
		t.Errorf("a higher p99 reported as lower:\n%s", got)
	}
	svg := chart([]row{atomic, none, short}, o)
	for _, want := range []string{"p99 50.0 ms, exact", "oversold 10", "not exact"} {
		if !strings.Contains(svg, want) {
			t.Errorf("chart lacks %q:\n%s", want, svg)
		}
	}
}

// The load report's lines come from the run's figures too.
func TestLoadReportComesFromTheRun(t *testing.T) {
	o := loadOptions{db: "postgres", stock: 100, buyers: 10, procs: 2, rate: 1000}
	four := int64(4)
	rows := []loadRow{
		{Strategy: "atomic", Orders: 100, OrdersPerS: 100, P99ms: 900, Balanced: true},
		{Strategy: "combining", Orders: 100, OrdersPerS: 950, VsAtomic: 9.5, P99ms: 30, Balanced: true},
		{Strategy: "redis", Orders: 100, OrdersPerS: 300, VsAtomic: 3, P99ms: 40, Balanced: true, Available: 5, RedisCount: &four},
		{Strategy: "buckets", Orders: 100, OrdersPerS: 200, VsAtomic: 2, Oversold: 3},
	}
	var b strings.Builder
	if err := loadReport(&b, rows, o); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"combining took orders 9.5× as fast as atomic's single-row UPDATE, p99 30 ms against 900 ms",
		"combining kept up with the 1000 requests/s sent",
		"redis: Redis counts 4 units after Reconcile, the database 5",
		"buckets broke the inventory: oversold 3",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"redis kept up", "atomic kept up", "atomic took orders"} {
		if strings.Contains(got, not) {
			t.Errorf("the report says %q of a run that shows otherwise:\n%s", not, got)
		}
	}
}
