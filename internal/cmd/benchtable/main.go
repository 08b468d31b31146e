// Command benchtable turns `go test -bench` output from dlock's
// benchmarks into one table, backend × workload, with the median of each
// metric across repeated runs:
//
//	go test -run '^$' -bench . -count 5 ./... | go run ./internal/cmd/benchtable
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

type key struct{ pkg, bench string }

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	metrics := map[key]map[string][]float64{}
	var order []key
	pkg := ""
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(p, "github.com/dlockhq/dlock/")
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i] // drop -GOMAXPROCS
		}
		k := key{pkg, strings.TrimPrefix(name, "Benchmark")}
		if metrics[k] == nil {
			metrics[k] = map[string][]float64{}
			order = append(order, k)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			metrics[k][f[i+1]] = append(metrics[k][f[i+1]], v)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(order) == 0 {
		return fmt.Errorf("no benchmark results on standard input")
	}
	median := func(k key, unit string) string {
		vs := slices.Clone(metrics[k][unit])
		if len(vs) == 0 {
			return "–"
		}
		slices.Sort(vs)
		v := vs[len(vs)/2]
		switch {
		case v >= 1e6 && strings.HasSuffix(unit, "ns") || unit == "ns/cycle" || unit == "gap-ns" || unit == "rtt-ns":
			return fmt.Sprintf("%.0f µs", v/1e3)
		case unit == "allocs/op" || v >= 100:
			return fmt.Sprintf("%.0f", v)
		}
		return fmt.Sprintf("%.2f", v)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tworkload\tcycle\tround trip\tcycle/rtt\tallocs\tacq/s\thand-off gap\tgap/rtt\tlost\tviolations\treq/hand-off\truns\t")
	for _, k := range order {
		workload, backend, _ := strings.Cut(k.bench, "/")
		if backend != "" {
			backend = "/" + backend
		}
		runs := len(metrics[k]["ns/op"])
		switch {
		case strings.HasPrefix(workload, "Uncontended"):
			fmt.Fprintf(tw, "%s%s\tW1\t%s\t%s\t%s\t%s\t\t\t\t\t\t\t%d\t\n", k.pkg, backend,
				median(k, "ns/cycle"), median(k, "rtt-ns"), median(k, "rtts/cycle"), median(k, "allocs/op"), runs)
		case strings.HasPrefix(workload, "Herd"):
			fmt.Fprintf(tw, "%s%s\therd (64)\t\t\t\t\t\t\t\t\t\t%s\t%d\t\n", k.pkg, backend, median(k, "requests/hand-off"), runs)
		default:
			fmt.Fprintf(tw, "%s%s\tW2\t\t%s\t\t\t%s\t%s\t%s\t%s\t%s\t\t%d\t\n", k.pkg, backend,
				median(k, "rtt-ns"), median(k, "acq/s"), median(k, "gap-ns"), median(k, "gap-rtts"),
				median(k, "lost-updates"), median(k, "violations"), runs)
		}
	}
	return tw.Flush()
}
