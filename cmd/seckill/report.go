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
	for _, r := range rows {
		if r.Oversold > 0 {
			fmt.Fprintf(w, "\n%s sold %d units of a stock of %d: concurrent buyers overwrote each other's decrements.\n", r.Strategy, r.Orders, o.stock)
		}
	}
	return nil
}

// chart renders orders/s per strategy as an SVG bar chart; oversold
// strategies are red.
func chart(rows []row, o options) string {
	const barH, gap, left, width = 26, 8, 110, 520
	var best float64
	for _, r := range rows {
		best = max(best, r.OrdersPerS)
	}
	h := 60 + len(rows)*(barH+gap)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="13">`+"\n", left+width+150, h)
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
		color, note := "#4a7bd0", fmt.Sprintf("%.0f/s", r.OrdersPerS)
		if r.Oversold > 0 {
			color, note = "#d04a4a", fmt.Sprintf("%.0f/s, oversold %d", r.OrdersPerS, r.Oversold)
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="%s"/>`+"\n", left, y, w, barH, color)
		fmt.Fprintf(&b, `<text x="%.0f" y="%d">%s</text>`+"\n", float64(left)+w+6, y+18, note)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
