package main

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestTable(t *testing.T) {
	in := `pkg: github.com/dlockhq/dlock/adapters/redis
BenchmarkUncontended-2   	    5000	    192212 ns/op	    145194 ns/cycle	     46907 rtt-ns	         3.095 rtts/cycle	    3144 B/op	      65 allocs/op
BenchmarkUncontended-2   	    5000	    192212 ns/op	    155194 ns/cycle	     46907 rtt-ns	         3.300 rtts/cycle	    3144 B/op	      65 allocs/op
BenchmarkHerd/fair-2     	       1	 386065463 ns/op	         2.031 requests/hand-off	         2.417 held-requests/hand-off
BenchmarkContended/clients=8-2     	    5000	    270799 ns/op	      3693 acq/s	    118512 gap-ns	         4.470 gap-rtts	         1.600 retook-%	         0 lost-updates	     26510 rtt-ns	         0 violations
BenchmarkUncontendedPeers/redsync-2   	    5000	    192212 ns/op	    290388 ns/cycle	     46907 rtt-ns	         6.000 rtts/cycle	    3144 B/op	      65 allocs/op
BenchmarkContendedPeers/redsync/clients=8-2     	    5000	    270799 ns/op	      7386 acq/s	    118512 gap-ns	         4.470 gap-rtts	        97.000 retook-%	         0 lost-updates	     26510 rtt-ns	         0 violations
BenchmarkSeckill/lock-2   	       1	 343236457 ns/op	       300.0 orders/s	         1.208 p50-ms	       340.8 p99-ms
BenchmarkSeckillPeers/redsync-2   	       1	 343236457 ns/op	       600.0 orders/s	         66.93 p50-ms	       279.1 p99-ms
pkg: github.com/dlockhq/dlock/advisory
BenchmarkUncontended/postgres-2   	    5000	    192212 ns/op	    200000 ns/cycle	     46907 rtt-ns	         3.095 rtts/cycle	    3144 B/op	      65 allocs/op
BenchmarkUncontendedRaw/postgres-2   	    5000	    192212 ns/op	    100000 ns/cycle	     46907 rtt-ns	         3.095 rtts/cycle	    3144 B/op	      65 allocs/op
BenchmarkUncontendedRaw/mysql-2   	    5000	    192212 ns/op	    50000 ns/cycle	     46907 rtt-ns	         3.095 rtts/cycle	    3144 B/op	      65 allocs/op
`
	var out strings.Builder
	if err := run(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	// The releaser re-took share is a whole percentage. Ratios to the best
	// peer on the same server: redis's W1 is about half
	// redsync's cycle (0.53×) and a little more in round trips per cycle
	// (0.55×), its W2 half redsync's rate; advisory/postgres is compared
	// with raw PostgreSQL, not raw MySQL: twice its cycle, the same round
	// trips per cycle.
	for _, want := range []string{"adapters/redis", "W1:", "3.30", "W2:", "3693", "4.47", " 2%", "97%", "Herd:", "2.03", "2.42", "with 10 ms holds",
		"0.53× adapters/redis/redsync", "0.55× adapters/redis/redsync", "0.50× adapters/redis/redsync",
		"2.00× advisory/postgres (raw)", "1.00× advisory/postgres (raw)",
		"adapters/redis/lock", "W3:", "1.2 ms", "340.8 ms", "0.50× adapters/redis/redsync"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(strings.NewReader("nothing"), &out); err == nil {
		t.Error("no results: want an error")
	}
}

// TestRunsPairUp: make bench runs a package's benchmarks once per pass, so
// a dlock row's runs pair up with its peer's. A pass the machine slowed
// down (the second here) moves both sides and no ratio: each pair says
// 1.10 or 1.20, where the ratio of the medians would say 1.20.
func TestRunsPairUp(t *testing.T) {
	in := `pkg: github.com/dlockhq/dlock/advisory
BenchmarkUncontended/postgres-2      3000  1 ns/op  110000 ns/cycle
BenchmarkUncontendedRaw/postgres-2   3000  1 ns/op  100000 ns/cycle
BenchmarkUncontended/postgres-2      3000  1 ns/op  330000 ns/cycle
BenchmarkUncontendedRaw/postgres-2   3000  1 ns/op  300000 ns/cycle
BenchmarkUncontended/postgres-2      3000  1 ns/op  120000 ns/cycle
BenchmarkUncontendedRaw/postgres-2   3000  1 ns/op  100000 ns/cycle
BenchmarkUncontended/mysql-2         3000  1 ns/op  120000 ns/cycle
BenchmarkUncontendedRaw/mysql-2      3000  1 ns/op  100000 ns/cycle
BenchmarkUncontendedRaw/mysql-2      3000  1 ns/op  300000 ns/cycle
`
	var out strings.Builder
	if err := run(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	// mysql's runs do not pair (one against two): the ratio of the medians,
	// 120 µs over the upper median 300 µs, with no spread. postgres's
	// pairs spread from 1.10 to 1.20.
	for _, want := range []string{"1.10× advisory/postgres (raw) (1.10–1.20)", "0.40× advisory/mysql (raw)  "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

// The page make bench writes: the fixed text, the run's date, machine
// and command, the tables; no commit hash.
func TestDoc(t *testing.T) {
	in := `pkg: github.com/dlockhq/dlock/adapters/redis
BenchmarkUncontended-2   	    5000	    192212 ns/op	    145194 ns/cycle	     46907 rtt-ns	         3.095 rtts/cycle	    3144 B/op	      65 allocs/op
`
	file := t.TempDir() + "/benchmarks.md"
	at := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	if err := writeDoc(strings.NewReader(in), file, "make bench BENCH_COUNT=1", at); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{"# Benchmarks", "W1: one client", "2026-11-28 09:00 UTC", "`make bench BENCH_COUNT=1`", "cores"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if err := writeDoc(strings.NewReader("no results"), file, "x", at); err == nil {
		t.Error("writeDoc of no results succeeded")
	}
}
