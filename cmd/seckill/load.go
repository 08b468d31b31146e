package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/dlockhq/dlock/internal/servers"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/inventory"
)

// loadOptions are the flags of seckill load.
type loadOptions struct {
	db         string
	strategies []inventory.Strategy
	stock      int
	buyers     int
	procs      int
	rate       int
	duration   time.Duration
	migrate    bool
	json       bool
	chart      string
	conns      int
	killAfter  time.Duration
	confirm    bool
	redis      string
	buckets    int
}

const loadUsage = "usage: seckill load [--db postgres|mysql] [--strategy atomic,combining,redis,buckets] [--redis 127.0.0.1:6379] [--buckets 16] [--stock 10000] [--buyers 2000] [--procs 4] [--rate 6000] [--duration 10s] [--conns 16] [--kill-after D] [--migrate] [--json] [--chart load.svg]"

func parseLoad(args []string) (loadOptions, error) {
	fs := flag.NewFlagSet("seckill load", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o loadOptions
	var strategies string
	fs.StringVar(&o.db, "db", "postgres", "postgres or mysql")
	fs.StringVar(&strategies, "strategy", "atomic,combining,redis,buckets", "inventory strategies, comma-separated")
	fs.IntVar(&o.buckets, "buckets", 16, "rows the buckets strategy splits the item over")
	fs.StringVar(&o.redis, "redis", servers.RedisAddr(), "the redis strategy's Redis server")
	fs.IntVar(&o.stock, "stock", 10000, "units of the hot item")
	fs.IntVar(&o.buyers, "buyers", 2000, "users buying; each may buy stock/buyers units")
	fs.IntVar(&o.procs, "procs", 4, "service processes (seckill serve) behind the database")
	fs.IntVar(&o.rate, "rate", 6000, "requests per second, sent open-loop")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long to send requests")
	fs.IntVar(&o.conns, "conns", 16, "database connections of each service process")
	fs.BoolVar(&o.migrate, "migrate", false, "apply dlock's and the inventory's migrations first")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	fs.StringVar(&o.chart, "chart", "", "write an SVG latency histogram to this file")
	fs.BoolVar(&o.confirm, "confirm", false, "after the requests, confirm every reservation answered 201 (through the live processes)")
	fs.DurationVar(&o.killAfter, "kill-after", 0, "SIGKILL the first service process this long into each run (a crash test)")
	if err := parseFlags(fs, args, loadUsage); err != nil {
		return o, err
	}
	if err := o.check(); err != nil {
		return o, err
	}
	for _, name := range strings.Split(strategies, ",") {
		s, err := strategyOf(name)
		if err != nil {
			return o, err
		}
		o.strategies = append(o.strategies, s)
	}
	return o, nil
}

// check refuses options out of range.
func (o loadOptions) check() error {
	switch {
	case o.db != "postgres" && o.db != "mysql":
		return fmt.Errorf("--db must be postgres or mysql, got %q", o.db)
	case o.stock <= 0 || o.buyers <= 0 || o.procs <= 0 || o.rate <= 0 || o.conns <= 0:
		return errors.New("--stock, --buyers, --procs, --rate and --conns must be positive")
	case o.procs > 16:
		return fmt.Errorf("--procs %d: at most 16 service processes", o.procs)
	case o.duration <= 0 || o.duration > time.Hour:
		return fmt.Errorf("--duration must be between 0 and 1h, got %v", o.duration)
	case int64(o.rate)*int64(o.duration/time.Second+1) > 10_000_000:
		return errors.New("--rate × --duration is over 10 million requests")
	}
	if err := checkRedisAddr(o.redis); err != nil {
		return err
	}
	if o.buckets < 1 || o.buckets > inventory.MaxBuckets {
		return fmt.Errorf("--buckets must be between 1 and %d, got %d", inventory.MaxBuckets, o.buckets)
	}
	return o.checkKill()
}

// checkKill refuses a --kill-after outside the run, or with no process
// left to serve.
func (o loadOptions) checkKill() error {
	switch {
	case o.killAfter < 0 || o.killAfter >= o.duration:
		return fmt.Errorf("--kill-after must be within --duration, got %v", o.killAfter)
	case o.killAfter > 0 && o.procs < 2:
		return errors.New("--kill-after needs --procs 2 or more: a process must survive")
	}
	return nil
}

// loadRow is one strategy's line of the load report.
type loadRow struct {
	Strategy   string  `json:"strategy"`
	Requests   int     `json:"requests"`
	Orders     int     `json:"orders"`
	Rejected   int     `json:"rejected"` // 409: sold out or over the user's limit
	Admission  int     `json:"admission_429"`
	Errors     int     `json:"errors"` // any other answer, or none
	OrdersPerS float64 `json:"orders_per_s"`
	P50ms      float64 `json:"p50_ms"` // of the requests that ordered
	P99ms      float64 `json:"p99_ms"`
	VsAtomic   float64 `json:"orders_per_s_vs_atomic,omitempty"`
	// What the database holds after the run.
	Available  int64 `json:"available"`
	Reserved   int64 `json:"reserved"`
	Oversold   int64 `json:"oversold"`
	Duplicates int   `json:"duplicate_orders"`
	// Lost: reservations answered 201 that the database does not hold.
	Lost int `json:"lost_orders"`
	// Unanswered: reservations the database holds whose request got no
	// 201 (its process was killed, or the client gave up): they expire.
	Unanswered int `json:"unanswered_reservations"`
	// Confirmed: confirms answered 200 (with --confirm); ConfirmedLost:
	// of those, reservations the database does not hold as confirmed.
	Confirmed     int    `json:"confirmed"`
	ConfirmedLost int    `json:"confirmed_lost"`
	Sold          int64  `json:"sold"`
	Balanced      bool   `json:"balanced"` // available + reserved + sold = initial, none negative
	OverLimit     int    `json:"users_over_limit"`
	FirstError    string `json:"first_error,omitempty"`
	// RedisCount: the redis strategy's count in Redis after the run and a
	// Reconcile, which must equal Available.
	RedisCount *int64 `json:"redis_count,omitempty"`

	hist vegeta.Histogram
}

// histogramBuckets are the latency chart's buckets.
var histogramBuckets = vegeta.Buckets{0, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second}

func load(o loadOptions) (err error) {
	ctx := context.Background()
	db, err := openDB(ctx, o.db, 4, o.migrate)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	var rows []loadRow
	for _, st := range o.strategies {
		r, err := loadOne(ctx, db, o, st)
		if err != nil {
			return fmt.Errorf("%s: %w", st, err)
		}
		rows = append(rows, r)
	}
	for i := range rows {
		for _, a := range rows {
			if a.Strategy == "atomic" && a.OrdersPerS > 0 {
				rows[i].VsAtomic = rows[i].OrdersPerS / a.OrdersPerS
			}
		}
	}
	if o.chart != "" {
		if err := os.WriteFile(o.chart, []byte(histogramSVG(rows)), 0o644); err != nil {
			return err
		}
	}
	if o.json {
		return printJSON(rows)
	}
	return loadReport(os.Stdout, rows, o)
}

// loadOne sells a fresh hot item through o.procs service processes
// running strategy st, at o.rate requests a second for o.duration, and
// then counts what the database holds.
func loadOne(ctx context.Context, db *sql.DB, o loadOptions, st inventory.Strategy) (loadRow, error) {
	row := loadRow{Strategy: st.String(), hist: vegeta.Histogram{Buckets: histogramBuckets}}
	opts := []inventory.Option{inventory.WithBuckets(o.buckets)}
	if st == inventory.Buckets { // its AddItem splits the item
		opts = append(opts, inventory.WithStrategy(st))
	}
	s, err := inventory.New(db, opts...)
	if err != nil {
		return row, err
	}
	sku := fmt.Sprintf("hot-%s-%d", st, time.Now().UnixNano())
	limit := (o.stock + o.buyers - 1) / o.buyers
	if err := s.AddItem(ctx, sku, int64(o.stock), limit); err != nil {
		return row, fmt.Errorf("%w (run with --migrate to create the tables)", err)
	}
	addrs, procs, stop, err := startServices(o, st)
	defer stop()
	if err != nil {
		return row, err
	}
	var n atomic.Uint64 // vegeta's workers call the targeter at once
	targeter := func(t *vegeta.Target) error {
		i := n.Add(1) - 1
		body, _ := json.Marshal(inventory.ReserveBody{RequestID: fmt.Sprintf("%s-%d", sku, i), UserID: int64(i%uint64(o.buyers)) + 1, SKU: sku, Qty: 1})
		t.Method, t.URL, t.Body = "POST", addrs[i%uint64(len(addrs))]+"/reservations", body
		t.Header = map[string][]string{"Content-Type": {"application/json"}}
		return nil
	}
	attacker := vegeta.NewAttacker(vegeta.Timeout(30*time.Second), vegeta.MaxBody(4<<10), vegeta.KeepAlive(true))
	bar := progressBar(st.String(), o.duration)
	if o.killAfter > 0 {
		t := time.AfterFunc(o.killAfter, func() { _ = procs[0].Process.Kill() })
		defer t.Stop()
	}
	var a attack
	for res := range attacker.Attack(targeter, vegeta.Rate{Freq: o.rate, Per: time.Second}, o.duration, st.String()) {
		if err := a.add(&row, res); err != nil {
			return row, err
		}
		bar(res.Timestamp.Sub(a.start))
	}
	fmt.Fprintf(os.Stderr, "%s%-10s %d requests in %v\n", lineStart(), st, row.Requests, o.duration)
	if row.Orders > 0 {
		row.OrdersPerS = float64(row.Orders) / a.lastOrder.Sub(a.start).Seconds()
		row.P50ms = float64(a.lat.Quantile(0.5)) / 1e6
		row.P99ms = float64(a.lat.Quantile(0.99)) / 1e6
	}
	ordered := a.ordered
	confirmed := map[int64]bool{}
	if o.confirm {
		live := addrs
		if o.killAfter > 0 {
			live = addrs[1:]
		}
		confirmed = confirmAll(live, ordered)
		row.Confirmed = len(confirmed)
	}
	stop()
	if err := count(ctx, db, s, sku, limit, ordered, confirmed, &row); err != nil {
		return row, err
	}
	if st == inventory.Redis {
		return row, redisCount(ctx, db, o.redis, sku, &row)
	}
	return row, nil
}

// redisCount reconciles the redis strategy's count of sku, as the
// fleet's sweeper does, and puts it in row.
func redisCount(ctx context.Context, db *sql.DB, addr, sku string, row *loadRow) (err error) {
	rc, err := openRedis(ctx, addr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rc.Close()) }()
	s, err := inventory.New(db, inventory.WithStrategy(inventory.Redis), inventory.WithRedis(rc, ""))
	if err != nil {
		return err
	}
	if err := s.Reconcile(ctx, sku); err != nil {
		return err
	}
	n, _, err := s.Gate(ctx, sku)
	row.RedisCount = &n
	return err
}

// attack is what a run's results add up to, beyond its row's counts.
type attack struct {
	lat              vegeta.LatencyMetrics // of the requests that ordered
	start, lastOrder time.Time
	ordered          map[int64]bool // reservations answered 201
}

// add counts res into row.
func (a *attack) add(row *loadRow, res *vegeta.Result) error {
	if a.start.IsZero() || res.Timestamp.Before(a.start) {
		a.start = res.Timestamp
	}
	row.Requests++
	switch res.Code {
	case 201:
		row.Orders++
		a.lat.Add(res.Latency)
		row.hist.Add(res)
		if res.End().After(a.lastOrder) {
			a.lastOrder = res.End()
		}
		var got struct{ ID int64 }
		if err := json.Unmarshal(res.Body, &got); err != nil || got.ID == 0 {
			return fmt.Errorf("a 201 without a reservation: %q", res.Body)
		}
		if a.ordered == nil {
			a.ordered = map[int64]bool{}
		}
		a.ordered[got.ID] = true
	case 409:
		row.Rejected++
	case 429:
		row.Admission++
	default:
		row.Errors++
		if row.FirstError == "" {
			row.FirstError = strings.TrimSpace(fmt.Sprintf("%d %s %s", res.Code, res.Error, res.Body))
		}
	}
	return nil
}

// confirmAll confirms each reservation in ordered through the services at
// addrs, 16 at a time, and returns those answered 200.
func confirmAll(addrs []string, ordered map[int64]bool) map[int64]bool {
	var mu sync.Mutex
	confirmed := map[int64]bool{}
	ids := make(chan int64)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				resp, err := client.Post(fmt.Sprintf("%s/reservations/%d/confirm", addrs[w%len(addrs)], id), "application/json", nil)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close() // read to the end; nothing to report
				if resp.StatusCode == http.StatusOK {
					mu.Lock()
					confirmed[id] = true
					mu.Unlock()
				}
			}
		}()
	}
	for id := range ordered {
		ids <- id
	}
	close(ids)
	wg.Wait()
	return confirmed
}

// count fills row with what the database holds for sku, against the
// reservations answered 201 (ordered) and the confirms answered 200.
func count(ctx context.Context, db *sql.DB, s *inventory.Store, sku string, limit int, ordered, confirmed map[int64]bool, row *loadRow) error {
	it, err := s.Item(ctx, sku)
	if err != nil {
		return err
	}
	row.Available, row.Reserved, row.Sold = it.Available, it.Reserved, it.Sold
	row.Oversold = max(0, it.Reserved+it.Sold-it.Initial, -it.Available)
	row.Balanced = it.Available+it.Reserved+it.Sold == it.Initial && it.Available >= 0 && it.Reserved >= 0 && it.Sold >= 0
	d, err := sqldialect.Of(ctx, db)
	if err != nil {
		return err
	}
	q := func(query string) string { // $n in the dialect's placeholders
		return strings.NewReplacer("$1", d.Placeholder(1), "$2", d.Placeholder(2)).Replace(query)
	}
	held, sold, err := reservationsOf(ctx, db, q, sku, ordered, confirmed, row)
	if err != nil {
		return err
	}
	if held != it.Reserved || sold != it.Sold {
		row.Balanced = false
	}
	if err := db.QueryRowContext(ctx, q("SELECT count(*) - count(DISTINCT request_id) FROM inventory_reservations WHERE sku = $1"), sku).Scan(&row.Duplicates); err != nil {
		return err
	}
	over := "SELECT count(*) FROM (SELECT user_id FROM inventory_reservations WHERE sku = $1 AND state IN ('reserved', 'confirmed') GROUP BY user_id HAVING SUM(qty) > $2) o"
	return db.QueryRowContext(ctx, q(over), sku, limit).Scan(&row.OverLimit)
}

// reservationsOf reads sku's reserved and confirmed reservations: the
// units of each, and into row those answered 201 and confirmed that it
// lacks and those it holds that were never answered 201.
func reservationsOf(ctx context.Context, db *sql.DB, q func(string) string, sku string, ordered, confirmed map[int64]bool, row *loadRow) (held, sold int64, err error) {
	rows, err := db.QueryContext(ctx, q("SELECT id, qty, state FROM inventory_reservations WHERE sku = $1 AND state IN ('reserved', 'confirmed')"), sku)
	if err != nil {
		return 0, 0, err
	}
	found, confirmedFound := 0, 0
	for rows.Next() {
		var id, qty int64
		var state string
		if err := rows.Scan(&id, &qty, &state); err != nil {
			_ = rows.Close() // the Scan error is the one to report
			return 0, 0, err
		}
		if state == "confirmed" {
			sold += qty
			if confirmed[id] {
				confirmedFound++
			}
		} else {
			held += qty
		}
		if ordered[id] {
			found++
		} else {
			row.Unanswered++
		}
	}
	row.Lost = len(ordered) - found
	row.ConfirmedLost = len(confirmed) - confirmedFound
	return held, sold, errors.Join(rows.Err(), rows.Close())
}

// serveCommand is the command that runs this program with args; tests,
// whose binary is not this program, replace it.
var serveCommand = func(args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return exec.Command(self, args...), nil
}

// startServices starts o.procs seckill serve processes on free loopback
// ports and returns their base URLs, once each is serving, and a function
// that stops them.
func startServices(o loadOptions, st inventory.Strategy) (addrs []string, cmds []*exec.Cmd, stop func(), err error) {
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		for _, c := range cmds {
			_ = c.Process.Signal(os.Interrupt) // it may have exited
		}
		for _, c := range cmds {
			_ = c.Wait() // its exit status is not the run's
		}
	}
	for range o.procs {
		cmd, err := serveCommand("serve", "--db", o.db, "--addr", "127.0.0.1:0", "--strategy", st.String(),
			"--conns", strconv.Itoa(o.conns), "--per-user", "4", "--per-item", "4096", "--redis", o.redis)
		if err != nil {
			return nil, nil, stop, err
		}
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, stop, err
		}
		if err := cmd.Start(); err != nil {
			return nil, nil, stop, err
		}
		cmds = append(cmds, cmd)
		line, err := bufio.NewReader(out).ReadString('\n')
		_, addr, found := strings.Cut(strings.TrimSpace(line), " on ")
		if err != nil || !found {
			return nil, nil, stop, fmt.Errorf("seckill serve did not start: %q", line)
		}
		addrs = append(addrs, addr)
	}
	return addrs, cmds, stop, nil
}

// progressBar redraws a strategy's line on a terminal while it runs.
func progressBar(name string, total time.Duration) func(time.Duration) {
	if !stderrIsTerminal {
		return func(time.Duration) {}
	}
	var last time.Time
	return func(at time.Duration) {
		if time.Since(last) > 200*time.Millisecond {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "\r%-10s %4.1fs of %v", name, at.Seconds(), total)
		}
	}
}

// loadReport prints the table and what it shows, computed from the run.
func loadReport(w io.Writer, rows []loadRow, o loadOptions) error {
	fmt.Fprintf(w, "one item, stock %d, %d buyers, %d service processes, %d requests/s asked for %v (%s); the requests column is what was sent: a busy machine sends fewer\n\n",
		o.stock, o.buyers, o.procs, o.rate, o.duration, o.db)
	fmt.Fprintf(w, "%-10s %8s %7s %8s %5s %6s %10s %8s %8s %9s %8s %8s\n",
		"strategy", "requests", "orders", "rejected", "429", "errors", "orders/s", "p50 ms", "p99 ms", "vs atomic", "oversold", "balanced")
	for _, r := range rows {
		vs := "-"
		if r.VsAtomic > 0 {
			vs = fmt.Sprintf("%.2fx", r.VsAtomic)
		}
		fmt.Fprintf(w, "%-10s %8d %7d %8d %5d %6d %10.0f %8.1f %8.1f %9s %8d %8v\n",
			r.Strategy, r.Requests, r.Orders, r.Rejected, r.Admission, r.Errors, r.OrdersPerS, r.P50ms, r.P99ms, vs, r.Oversold, r.Balanced)
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		loadLessons(w, r, rows, o)
	}
	return nil
}

// loadLessons prints what r's figures show, against the run's other rows.
func loadLessons(w io.Writer, r loadRow, rows []loadRow, o loadOptions) {
	switch {
	case !r.Balanced || r.Oversold > 0 || r.Duplicates != 0 || r.OverLimit > 0 || r.Lost > 0 || r.ConfirmedLost > 0:
		fmt.Fprintf(w, "%s broke the inventory: oversold %d, duplicates %d, orders lost %d, confirms lost %d, users over the limit %d, balanced %v\n",
			r.Strategy, r.Oversold, r.Duplicates, r.Lost, r.ConfirmedLost, r.OverLimit, r.Balanced)
	case r.RedisCount != nil && *r.RedisCount != r.Available:
		fmt.Fprintf(w, "%s: Redis counts %d units after Reconcile, the database %d\n", r.Strategy, *r.RedisCount, r.Available)
	case r.Errors > 0:
		fmt.Fprintf(w, "%s answered %d requests with errors (%d reservations held without a 201 expire by their TTL); first: %s\n",
			r.Strategy, r.Errors, r.Unanswered, r.FirstError)
	}
	if r.VsAtomic > 0 && r.Strategy != "atomic" {
		fmt.Fprintf(w, "%s took orders %.1f× as fast as atomic's single-row UPDATE, p99 %.0f ms against %.0f ms\n",
			r.Strategy, r.VsAtomic, r.P99ms, p99Of(rows, "atomic"))
	}
	if r.OrdersPerS >= 0.9*float64(o.rate) {
		fmt.Fprintf(w, "%s kept up with the %d requests/s sent: its ceiling is above what this run shows (raise --rate to find it)\n",
			r.Strategy, o.rate)
	}
}

func p99Of(rows []loadRow, strategy string) float64 {
	for _, r := range rows {
		if r.Strategy == strategy {
			return r.P99ms
		}
	}
	return math.NaN()
}

// histogramSVG draws each strategy's latency histogram of the requests
// that ordered, as grouped bars: the share of orders per bucket.
func histogramSVG(rows []loadRow) string {
	const w, h, left, bottom, top = 760, 320, 50, 60, 30
	colors := []string{"#c0392b", "#2471a3", "#229954", "#b7950b"}
	nb := len(histogramBuckets)
	group := float64(w-left-20) / float64(nb)
	bar := group / float64(len(rows)+1)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="13">Latency of the requests that ordered (share per bucket)</text>`+"\n", left)
	plot := float64(h - bottom - top)
	for i, r := range rows {
		for j, c := range r.hist.Counts {
			share := 0.0
			if r.hist.Total > 0 {
				share = float64(c) / float64(r.hist.Total)
			}
			x := float64(left) + float64(j)*group + float64(i)*bar
			bh := share * plot
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x, float64(h-bottom)-bh, bar, bh, colors[i%len(colors)])
		}
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
			left+i*140, h-18, colors[i%len(colors)], left+i*140+14, h-9, html.EscapeString(r.Strategy))
	}
	for j, lo := range histogramBuckets {
		x := float64(left) + float64(j)*group
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">≥%v</text>`+"\n", x, h-bottom+14, lo)
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#555"/>`+"\n", left, h-bottom, w-20, h-bottom)
	b.WriteString("</svg>\n")
	return b.String()
}
