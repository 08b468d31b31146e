// Command benchtable turns `go test -bench` output from dlock's
// benchmarks into a table per workload (W1, W2, the herd, W3: the
// seckill sale), a row per backend, with the median of each metric across
// repeated runs and each dlock row's ratio to the best peer on its server
// (and the spread of that ratio across passes). Runs pair up in order
// (see ratio), so repeat whole passes rather than each benchmark, as make
// bench does:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench . -count 1 ./...; done | go run ./internal/cmd/benchtable
//
// With -doc FILE it writes the tables into FILE, a Markdown page that
// says what the workloads are, how to read the tables, and the run's
// date, machine and command (-command): make bench writes
// docs/benchmarks.md so.
package main

import (
	"bufio"
	"bytes"
	_ "embed"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// docIntro is the page's fixed text: what the workloads and the columns
// are. Figures come only from the run.
//
//go:embed intro.md
var docIntro string

type key struct{ pkg, bench string }

func main() {
	doc := flag.String("doc", "", "write a Markdown page with the tables to this file")
	command := flag.String("command", "make bench", "the command that made the run, for -doc")
	flag.Parse()
	var err error
	if *doc == "" {
		err = run(os.Stdin, os.Stdout)
	} else {
		err = writeDoc(os.Stdin, *doc, *command, time.Now())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

// writeDoc writes the tables of in to file as a Markdown page dated now.
func writeDoc(in io.Reader, file, command string, now time.Time) error {
	var tables bytes.Buffer
	if err := run(in, &tables); err != nil {
		return err
	}
	var page bytes.Buffer
	page.WriteString(docIntro)
	fmt.Fprintf(&page, "\n## The run\n\n- date: %s\n- machine: %s\n- command: `%s`\n\n```text\n%s```\n",
		now.UTC().Format("2006-01-02 15:04 MST"), machine(), command, tables.String())
	return os.WriteFile(file, page.Bytes(), 0o644)
}

// machine describes where the run was: processor, cores, memory, Go.
func machine() string {
	cpu := "unknown processor"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%s, %d cores%s, %s %s/%s", cpu, runtime.NumCPU(), mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func run(in io.Reader, out io.Writer) error {
	res, err := parse(in)
	if err != nil {
		return err
	}
	first := true
	for _, t := range res.tables() {
		if len(t.rows) == 0 {
			continue
		}
		if !first {
			fmt.Fprintln(out)
		}
		first = false
		if err := res.write(out, t); err != nil {
			return err
		}
	}
	return nil
}

// results are the benchmark lines of a run: each benchmark's values by
// unit, in the order the benchmarks first appeared.
type results struct {
	metrics map[key]map[string][]float64
	order   []key
}

// parse reads go test -bench output.
func parse(in io.Reader) (*results, error) {
	res := &results{metrics: map[key]map[string][]float64{}}
	pkg := ""
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(p, "github.com/dlockhq/dlock/")
			continue
		}
		res.add(pkg, strings.Fields(line))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(res.order) == 0 {
		return nil, fmt.Errorf("no benchmark results on standard input")
	}
	return res, nil
}

// add records a benchmark line of pkg, split into fields; other lines
// are ignored.
func (res *results) add(pkg string, f []string) {
	if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
		return
	}
	name := f[0]
	if i := strings.LastIndex(name, "-"); i > 0 {
		name = name[:i] // drop -GOMAXPROCS
	}
	k := key{pkg, strings.TrimPrefix(name, "Benchmark")}
	if res.metrics[k] == nil {
		res.metrics[k] = map[string][]float64{}
		res.order = append(res.order, k)
	}
	for i := 2; i+1 < len(f); i += 2 {
		if v, err := strconv.ParseFloat(f[i], 64); err == nil {
			res.metrics[k][f[i+1]] = append(res.metrics[k][f[i+1]], v)
		}
	}
}

// value is the median of k's unit, 0 when it has none.
func (res *results) value(k key, unit string) float64 {
	vs := slices.Clone(res.metrics[k][unit])
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	return vs[len(vs)/2]
}

// median is value, formatted for its unit; "–" when there is none.
func (res *results) median(k key, unit string) string {
	if len(res.metrics[k][unit]) == 0 {
		return "–"
	}
	v := res.value(k, unit)
	switch {
	case v >= 1e6 && strings.HasSuffix(unit, "ns") || unit == "ns/cycle" || unit == "gap-ns" || unit == "rtt-ns":
		return fmt.Sprintf("%.0f µs", v/1e3)
	case unit == "retook-%":
		return fmt.Sprintf("%.0f%%", v)
	case strings.HasSuffix(unit, "-ms"):
		return fmt.Sprintf("%.1f ms", v)
	case unit == "allocs/op" || v >= 100:
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// vsPeer is k's unit over the best peer's on the same server (W1: the
// fastest cycle, or the fewest round trips per cycle; W2: the most
// acquisitions per second; W3: the most orders per second); "" for a
// peer, the herd, or a row with no peer.
func (res *results) vsPeer(k key, unit string) string {
	r := describe(k)
	if r.peer || r.workload == "herd" {
		return ""
	}
	bestKey, ok := res.bestPeer(r, unit)
	if !ok {
		return ""
	}
	name := describe(bestKey).label
	med, lo, hi, paired := ratio(res.metrics[k][unit], res.metrics[bestKey][unit])
	if !paired || lo == hi {
		return fmt.Sprintf("%.2f× %s", med, name)
	}
	return fmt.Sprintf("%.2f× %s (%.2f–%.2f)", med, name, lo, hi)
}

// bestPeer is the peer of r's workload and server with the best unit.
func (res *results) bestPeer(r row, unit string) (key, bool) {
	better := func(a, b float64) bool { return a < b }
	if unit == "acq/s" || unit == "orders/s" {
		better = func(a, b float64) bool { return a > b }
	}
	best, found, bestKey := 0.0, false, key{}
	for _, o := range res.order {
		d := describe(o)
		if !d.peer || d.workload != r.workload || d.server != r.server {
			continue
		}
		if v := res.value(o, unit); v > 0 && (!found || better(v, best)) {
			best, found, bestKey = v, true, o
		}
	}
	return bestKey, found
}

// byWorkload is the benchmarks whose workload match accepts, in order.
func (res *results) byWorkload(match func(string) bool) []key {
	var ks []key
	for _, k := range res.order {
		if match(describe(k).workload) {
			ks = append(ks, k)
		}
	}
	return ks
}

// table is one table of the report.
type table struct {
	title, header string
	rows          []key
	row           func(k key, r row) string
}

func (res *results) tables() []table {
	median, vsPeer := res.median, res.vsPeer
	return []table{
		{"W1: one client locks and unlocks a name", "backend\tcycle\tround trip\tcycle/rtt\tallocs\t÷ best peer\tcycle/rtt ÷ best peer\truns",
			res.byWorkload(func(w string) bool { return w == "W1" }),
			func(k key, r row) string {
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", r.label, median(k, "ns/cycle"), median(k, "rtt-ns"),
					median(k, "rtts/cycle"), median(k, "allocs/op"), vsPeer(k, "ns/cycle"), vsPeer(k, "rtts/cycle"))
			}},
		{"W2: clients contend for one name", "backend\tclients\tacq/s\thand-off gap\tgap/rtt\treleaser re-took\tlost\tviolations\t÷ best peer\truns",
			res.byWorkload(func(w string) bool { return strings.HasPrefix(w, "W2") }),
			func(k key, r row) string {
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", r.label, strings.TrimPrefix(r.workload, "W2 ×"), median(k, "acq/s"),
					median(k, "gap-ns"), median(k, "gap-rtts"), median(k, "retook-%"), median(k, "lost-updates"),
					median(k, "violations"), vsPeer(k, "acq/s"))
			}},
		{"Herd: 64 waiters, server requests per hand-off", "backend\trequests/hand-off\twith 10 ms holds\truns",
			res.byWorkload(func(w string) bool { return w == "herd" }),
			func(k key, r row) string {
				return fmt.Sprintf("%s\t%s\t%s", r.label, median(k, "requests/hand-off"), median(k, "held-requests/hand-off"))
			}},
		{"W3: a flash sale, 100 buyers", "backend\torders/s\tp50\tp99\t÷ best peer\truns",
			res.byWorkload(func(w string) bool { return w == "W3" }),
			func(k key, r row) string {
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", r.label, median(k, "orders/s"), median(k, "p50-ms"),
					median(k, "p99-ms"), vsPeer(k, "orders/s"))
			}},
	}
}

// write writes table t.
func (res *results) write(out io.Writer, t table) error {
	fmt.Fprintln(out, t.title)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, t.header+"\t")
	for _, k := range t.rows {
		fmt.Fprintf(tw, "%s\t%d\t\n", t.row(k, describe(k)), len(res.metrics[k]["ns/op"]))
	}
	return tw.Flush()
}

// row is what a benchmark's name says: its workload, the row's label, the
// server it ran on, and whether it measures a peer (another library, or
// the bare server primitive) rather than dlock.
type row struct {
	workload, label, server string
	peer                    bool
}

// describe reads a benchmark name: Uncontended… is W1, Contended… W2
// (with a clients=N sub-benchmark, "W2 ×N"), Seckill… W3, Herd the herd;
// a Raw or Peers suffix marks a peer, as do go-zookeeper and etcd's
// concurrency.Mutex. The sub-benchmark is the
// database (the SQL packages' server) or the peer's name.
func describe(k key) row {
	workload, sub, _ := strings.Cut(k.bench, "/")
	clients := ""
	if i := strings.LastIndex(sub, "clients="); i >= 0 {
		clients, sub = sub[i+len("clients="):], strings.TrimSuffix(sub[:i], "/")
	}
	var r row
	var suffix string
	switch {
	case strings.HasPrefix(workload, "Uncontended"):
		r.workload, suffix = "W1", strings.TrimPrefix(workload, "Uncontended")
	case strings.HasPrefix(workload, "Seckill"):
		r.workload, suffix = "W3", strings.TrimPrefix(workload, "Seckill")
	case strings.HasPrefix(workload, "Contended"):
		r.workload, suffix = "W2", strings.TrimPrefix(workload, "Contended")
		if clients != "" {
			r.workload += " ×" + clients
		}
	default:
		r.workload = "herd"
	}
	r.label, r.server = k.pkg, k.pkg
	if sub != "" {
		r.label += "/" + sub
	}
	switch {
	case suffix == "Raw":
		r.peer, r.server, r.label = true, k.pkg+"/"+sub, r.label+" (raw)"
	case suffix == "Peers" || sub == "go-zookeeper" || sub == "concurrency.Mutex":
		r.peer = true
	case k.pkg == "advisory" || k.pkg == "tablelock":
		r.server = k.pkg + "/" + sub
	}
	return r
}

// ratio is a dlock row's metric over its peer's. Where both ran the same
// number of times, the runs pair up in order (make bench runs every
// benchmark of a package once per pass, so a pair ran seconds apart) and
// the ratio is the median of the pairs' ratios: a pass the machine slowed
// down slows both sides of its pair. lo and hi are then the smallest and
// largest of the pairs' ratios, the spread of the passes. Otherwise it is
// the ratio of the medians, and paired is false.
func ratio(mine, peer []float64) (med, lo, hi float64, paired bool) {
	median := func(vs []float64) float64 {
		vs = slices.Clone(vs)
		slices.Sort(vs)
		return vs[len(vs)/2]
	}
	if len(mine) != len(peer) || slices.Contains(peer, 0) {
		return median(mine) / median(peer), 0, 0, false
	}
	rs := make([]float64, len(mine))
	for i := range mine {
		rs[i] = mine[i] / peer[i]
	}
	return median(rs), slices.Min(rs), slices.Max(rs), true
}
