package main

import (
	"fmt"
	"html"
	"io"
	"strings"
	"text/tabwriter"
)

// report prints the sale's table and what it shows.
func report(w io.Writer, rows []row, o options) error {
	fmt.Fprintf(w, "\nflash sale on %s: stock %d, %d users, %d concurrent buyers, %d process(es)\n\n", o.db, o.stock, o.users, o.buyers, o.procs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\torders\tstock left\toversold\tduplicates\terrors\torders/s\tp50 ms\tp99 ms\tvs atomic\t")
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\tskipped: %s\t\t\t\t\t\t\t\t\t\n", r.Strategy, r.Skipped)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.1f\t%.1f\t%.2f×\t\n",
			r.Strategy, r.Orders, r.StockLeft, r.Oversold, r.Duplicates, r.Failures, r.OrdersPerS, r.P50ms, r.P99ms, r.VsAtomic)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, line := range lessons(rows, o) {
		fmt.Fprintln(w, line)
	}
	return nil
}

// exact reports whether r sold what it could (the stock, or one unit to
// each user when there are fewer), once, to distinct users, and its stock
// left says so.
func exact(r row, o options) bool {
	return r.Skipped == "" && r.Oversold == 0 && r.Duplicates == 0 && r.Failures == 0 &&
		r.Orders == min(o.stock, o.users) && r.StockLeft == o.stock-r.Orders
}

// lessons says what this run shows, from its figures alone: which
// strategies oversold or were not exact, and which exact ones beat the
// atomic UPDATE, or lost to it, in throughput and in p99.
func lessons(rows []row, o options) []string {
	var out []string
	var base *row
	for i := range rows {
		if rows[i].Strategy == "atomic" && rows[i].Skipped == "" {
			base = &rows[i]
		}
	}
	var vs versus
	for _, r := range rows {
		if what := inexact(r, o); what != "" {
			out = append(out, what)
		} else if r.Skipped == "" && base != nil && r.Strategy != base.Strategy {
			vs.add(r, *base)
		}
	}
	if base == nil {
		return out
	}
	return append(out, vs.say(*base, o)...)
}

// inexact says how r's sale was wrong: oversold, or not exact; "" when it
// was exact or skipped.
func inexact(r row, o options) string {
	switch {
	case r.Skipped != "":
		return ""
	case r.Oversold > 0:
		return fmt.Sprintf("%s sold %d units of a stock of %d: concurrent buyers overwrote each other's decrements.", r.Strategy, r.Orders, o.stock)
	case !exact(r, o):
		return fmt.Sprintf("%s was not exact: %d orders, %d left in stock, %d duplicates, %d errors.", r.Strategy, r.Orders, r.StockLeft, r.Duplicates, r.Failures)
	}
	return ""
}

// versus sorts the exact strategies against the atomic UPDATE.
type versus struct{ faster, slower, steadier []string }

func (v *versus) add(r, base row) {
	switch ratio := r.OrdersPerS / base.OrdersPerS; {
	case ratio >= 1.1:
		v.faster = append(v.faster, fmt.Sprintf("%s %.1f×", r.Strategy, ratio))
	case ratio <= 0.9:
		v.slower = append(v.slower, fmt.Sprintf("%s %.2f×", r.Strategy, ratio))
	}
	if r.P99ms < base.P99ms {
		v.steadier = append(v.steadier, r.Strategy)
	}
}

func (v *versus) say(base row, o options) []string {
	var out []string
	if len(v.faster) > 0 {
		out = append(out, fmt.Sprintf("Faster than the atomic UPDATE in this run: %s. A lock strategy's buyers share one Locker and queue in the process, so the database sees one client at a time instead of %d racing one row; pessimistic and optimistic queue on the row in the database instead. The ranking depends on this machine and its load: run again before you trust it.",
			strings.Join(v.faster, ", "), o.buyers*o.procs))
	}
	if len(v.slower) > 0 {
		out = append(out, fmt.Sprintf("Slower than the atomic UPDATE in this run: %s: a lock costs round trips the single conditional UPDATE does not make.", strings.Join(v.slower, ", ")))
	}
	if len(v.steadier) > 0 {
		out = append(out, fmt.Sprintf("A lower p99 than the atomic UPDATE's (%.1f ms): %s.", base.P99ms, strings.Join(v.steadier, ", ")))
	}
	return out
}

// chart renders orders/s per strategy as an SVG bar chart, each bar
// labelled with its p50, p99 and whether the sale was exact; strategies
// that oversold or were not exact are red.
func chart(rows []row, o options) string {
	const barH, gap, left, width = 26, 8, 110, 520
	var best float64
	for _, r := range rows {
		best = max(best, r.OrdersPerS)
	}
	h := 60 + len(rows)*(barH+gap)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`+"\n", left+width+300, h)
	fmt.Fprintf(&b, `<text x="10" y="22" font-size="15">Flash sale on %s: orders/s per strategy (stock %d, %d buyers)</text>`+"\n", html.EscapeString(o.db), o.stock, o.buyers)
	for i, r := range rows {
		y := 40 + i*(barH+gap)
		fmt.Fprintf(&b, `<text x="10" y="%d">%s</text>`+"\n", y+18, html.EscapeString(r.Strategy))
		if r.Skipped != "" {
			fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#888">skipped</text>`+"\n", left, y+18)
			continue
		}
		w := 1.0
		if best > 0 {
			w = max(1, r.OrdersPerS/best*width)
		}
		color, note := "#4a7bd0", fmt.Sprintf("%.0f/s, p50 %.1f ms, p99 %.1f ms, exact", r.OrdersPerS, r.P50ms, r.P99ms)
		switch {
		case r.Oversold > 0:
			color, note = "#d04a4a", fmt.Sprintf("%.0f/s, p99 %.1f ms, oversold %d", r.OrdersPerS, r.P99ms, r.Oversold)
		case !exact(r, o):
			color, note = "#d04a4a", fmt.Sprintf("%.0f/s, p99 %.1f ms, not exact", r.OrdersPerS, r.P99ms)
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="%s"/>`+"\n", left, y, w, barH, color)
		fmt.Fprintf(&b, `<text x="%.0f" y="%d">%s</text>`+"\n", float64(left)+w+6, y+18, note)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
