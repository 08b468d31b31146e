// Command seckill runs a flash sale against every dlock strategy and
// reports which oversells, which is fast, and by how much; and it serves
// and loads the inventory service (package inventory).
//
//	seckill run [--db postgres|mysql] [--strategy all|name,…] [--stock 1000]
//	            [--buyers 200] [--users N] [--procs N] [--segments 8]
//	            [--migrate] [--json] [--chart sale.svg]
//	seckill serve [--db postgres|mysql] [--addr 127.0.0.1:8080]
//	            [--strategy combining|atomic|redis|buckets] [--redis 127.0.0.1:6379]
//	            [--ttl 10m] [--sweep 1s] [--per-user 4] [--per-item 1024]
//	            [--conns 16] [--migrate]
//	seckill load [--db postgres|mysql] [--strategy atomic,combining,redis,buckets]
//	            [--redis 127.0.0.1:6379] [--buckets 16]
//	            [--stock 10000] [--buyers 2000] [--procs 4] [--rate 6000]
//	            [--duration 10s] [--kill-after D] [--migrate] [--json] [--chart load.svg]
//
// serve is the inventory's HTTP API (inventory.Handler) with the fleet's
// sweeper; load starts --procs serve processes on loopback ports, drives
// them open-loop at --rate with vegeta, and reports orders/s, latency and
// what the database holds afterwards, per strategy.
//
// Buyers are concurrent; each of --users users (default twice the stock)
// tries once, so the item sells out. With --procs N the users are spread
// over N worker processes, as N application servers would be. Servers
// come from DLOCK_PG_DSN, DLOCK_MYSQL_DSN, DLOCK_REDIS_ADDR,
// DLOCK_ZK_ADDRS and DLOCK_ETCD_ENDPOINTS (defaults: the local servers); a
// strategy whose server is not reachable is reported as skipped.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/servers"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/seckill"
)

// strategyNames are the registered strategies, in report order; "all"
// runs them all.
var strategyNames = func() []string {
	var names []string
	for _, e := range seckill.Strategies {
		names = append(names, e.Name)
	}
	return names
}()

type options struct {
	db         string
	strategies []string
	stock      int
	buyers     int
	users      int
	procs      int
	segments   int
	migrate    bool
	json       bool
	chart      string
}

func main() {
	if len(os.Args) >= 2 && (os.Args[1] == "serve" || os.Args[1] == "load") {
		os.Exit(inventoryCommand(os.Args[1], os.Args[2:]))
	}
	if len(os.Args) < 2 || (os.Args[1] != "run" && os.Args[1] != "worker") {
		fmt.Fprintln(os.Stderr, "usage: seckill run [--db postgres|mysql] [--strategy all|name,...] [--stock N] [--buyers N] [--users N] [--procs N] [--migrate] [--json] [--chart FILE] | seckill serve|load [flags] (the inventory service; --help for each)")
		os.Exit(2)
	}
	opts, worker, err := parse(os.Args[1], os.Args[2:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(2)
	}
	if worker != nil {
		err = runWorker(opts, *worker)
	} else {
		err = run(opts)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(1)
	}
}

// workerSpec is a worker process's share of a sale.
type workerSpec struct {
	goods      int64
	firstUser  int64
	users      int
	strategyID string
}

// check refuses options out of range.
func (o options) check() error {
	switch {
	case o.db != "postgres" && o.db != "mysql":
		return fmt.Errorf("--db must be postgres or mysql, got %q", o.db)
	case o.stock <= 0:
		return fmt.Errorf("--stock must be positive, got %d", o.stock)
	case o.buyers <= 0:
		return fmt.Errorf("--buyers must be positive, got %d", o.buyers)
	case o.users < 0:
		return fmt.Errorf("--users must not be negative, got %d", o.users)
	case o.procs <= 0:
		return fmt.Errorf("--procs must be positive, got %d", o.procs)
	case o.segments <= 0:
		return fmt.Errorf("--segments must be positive, got %d", o.segments)
	}
	return nil
}

// strategiesOf reads --strategy: "all", or a comma-separated list.
func strategiesOf(flag string) ([]string, error) {
	if flag == "all" {
		return strategyNames, nil
	}
	var out []string
	for _, s := range strings.Split(flag, ",") {
		if !slices.Contains(strategyNames, s) {
			return nil, fmt.Errorf("unknown strategy %q; choose from all, %s", s, strings.Join(strategyNames, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}

func parse(cmd string, args []string) (options, *workerSpec, error) {
	fs := flag.NewFlagSet("seckill "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o options
	var strategy string
	fs.StringVar(&o.db, "db", "postgres", "postgres or mysql")
	fs.StringVar(&strategy, "strategy", "all", "all, or a comma-separated list of "+strings.Join(strategyNames, ", "))
	fs.IntVar(&o.stock, "stock", 1000, "units on sale")
	fs.IntVar(&o.buyers, "buyers", 200, "concurrent buyers")
	fs.IntVar(&o.users, "users", 0, "users trying to buy, once each (default twice the stock)")
	fs.IntVar(&o.procs, "procs", 1, "worker processes the buyers are spread over")
	fs.IntVar(&o.segments, "segments", 8, "stock segments for the segmented strategy")
	fs.BoolVar(&o.migrate, "migrate", false, "apply dlock's and seckill's migrations first")
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	fs.StringVar(&o.chart, "chart", "", "write an SVG chart of the report to this file")
	var w workerSpec
	if cmd == "worker" {
		fs.Int64Var(&w.goods, "goods", 0, "")
		fs.Int64Var(&w.firstUser, "first-user", 1, "")
	}
	if err := parseFlags(fs, args, "usage: seckill run [flags]"); err != nil {
		return o, nil, err
	}
	if err := o.check(); err != nil {
		return o, nil, err
	}
	if o.users == 0 {
		o.users = 2 * o.stock
	}
	var err error
	if o.strategies, err = strategiesOf(strategy); err != nil {
		return o, nil, err
	}
	if cmd == "worker" {
		if len(o.strategies) != 1 {
			return o, nil, errors.New("a worker runs one strategy")
		}
		w.users, w.strategyID = o.users, o.strategies[0]
		return o, &w, nil
	}
	return o, nil, nil
}

// env is the servers of a run.
type env struct {
	db, locks *sql.DB
	redis     *redis.Client
	zk        *zk.Conn
	etcd      *clientv3.Client
	redisErr  error
	zkErr     error
	etcdErr   error
}

func open(ctx context.Context, o options) (*env, error) {
	driver, dsn := "pgx", servers.PostgresDSN()
	if o.db == "mysql" {
		driver, dsn = "mysql", servers.MySQLDSN()
	}
	openDB := func() (*sql.DB, error) {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return nil, err
		}
		db.SetMaxIdleConns(64)
		db.SetMaxOpenConns(40)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := db.PingContext(pctx); err != nil {
			_ = db.Close() // unreachable: the ping's error is the one to report
			return nil, fmt.Errorf("%s not reachable at %s: %v (start it with scripts/services.sh up, or set %s)",
				o.db, servers.Redact(dsn), err, map[string]string{"pgx": servers.PostgresEnv, "mysql": servers.MySQLEnv}[driver])
		}
		return db, nil
	}
	e := &env{}
	var err error
	if e.db, err = openDB(); err != nil {
		return nil, err
	}
	// Advisory locks pin a connection per waiter: a pool of their own keeps
	// waiters from taking the connections the holder needs.
	if e.locks, err = openDB(); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("tcp", servers.RedisAddr(), time.Second); err != nil {
		e.redisErr = fmt.Errorf("redis not reachable at %s", servers.RedisAddr())
	} else {
		_ = c.Close() // a probe: it only had to connect
		e.redis = redis.NewClient(&redis.Options{Addr: servers.RedisAddr(), PoolSize: 4 * o.buyers})
	}
	e.zkErr = fmt.Errorf("zookeeper not reachable at %s", strings.Join(servers.ZKAddrs(), ","))
	for _, a := range servers.ZKAddrs() {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			_ = c.Close() // a probe: it only had to connect
			// A session no shorter than the zk strategy's lease (the
			// default TTL), so the lease ends before the session can.
			conn, _, err := zk.Connect(servers.ZKAddrs(), dlock.DefaultTTL, zk.WithLogInfo(false))
			if err == nil {
				e.zk, e.zkErr = conn, nil
			}
			break
		}
	}
	e.connectEtcd()
	return e, nil
}

// connectEtcd connects the etcd strategy's client when the server answers.
func (e *env) connectEtcd() {
	eps := servers.EtcdEndpoints()
	e.etcdErr = fmt.Errorf("etcd not reachable at %s", strings.Join(eps, ","))
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "dlock-ping"); err != nil {
		_ = c.Close() // unreachable: the probe's error is the one reported
		return
	}
	e.etcd, e.etcdErr = c, nil
}

// close closes the run's connections and reports the first failure.
func (e *env) close() error {
	errs := []error{e.db.Close(), e.locks.Close()}
	if e.redis != nil {
		errs = append(errs, e.redis.Close())
	}
	if e.zk != nil {
		e.zk.Close()
	}
	if e.etcd != nil {
		errs = append(errs, e.etcd.Close())
	}
	return errors.Join(errs...)
}

// strategy builds the registered strategy name, or says why it cannot run
// here. Lock-based strategies get one Locker, shared by every buyer
// goroutine as a service shares one: buyers exclude each other and queue
// in the process, one of them at a time contending on the server.
func (e *env) strategy(name string, o options) (*seckill.Registered, error) {
	entry, ok := seckill.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("unknown strategy %q", name)
	}
	switch {
	case entry.Needs == "redis" && e.redis == nil:
		return nil, e.redisErr
	case entry.Needs == "zk" && e.zk == nil:
		return nil, e.zkErr
	case entry.Needs == "etcd" && e.etcd == nil:
		return nil, e.etcdErr
	}
	srv := seckill.Servers{DB: e.db, Locks: e.locks, ZK: e.zk, Etcd: e.etcd, Segments: o.segments}
	if e.redis != nil {
		srv.Redis = e.redis
	}
	return entry.New(srv)
}

// row is one strategy's line of the report.
type row struct {
	Strategy   string  `json:"strategy"`
	Skipped    string  `json:"skipped,omitempty"`
	Orders     int     `json:"orders"`
	StockLeft  int     `json:"stock_left"`
	Oversold   int     `json:"oversold"`
	Duplicates int     `json:"duplicate_orders"`
	Failures   int     `json:"failures"`
	OrdersPerS float64 `json:"orders_per_s"`
	P50ms      float64 `json:"p50_ms"`
	P99ms      float64 `json:"p99_ms"`
	VsAtomic   float64 `json:"throughput_vs_atomic,omitempty"`
}

func run(o options) (err error) {
	ctx := context.Background()
	e, err := open(ctx, o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	if o.migrate {
		if err := migrations.Up(ctx, e.db); err != nil {
			return err
		}
		if err := seckill.Migrate(ctx, e.db); err != nil {
			return err
		}
	}
	rows, err := saleRows(ctx, e, o)
	if err != nil {
		return err
	}
	if o.chart != "" {
		if err := os.WriteFile(o.chart, []byte(chart(rows, o)), 0o644); err != nil {
			return err
		}
	}
	if o.json {
		return printJSON(rows)
	}
	return report(os.Stdout, rows, o)
}

// saleRows runs each strategy's sale and returns the report's rows.
func saleRows(ctx context.Context, e *env, o options) ([]row, error) {
	var rows []row
	for i, name := range o.strategies {
		r := row{Strategy: name}
		res, tally, err := sale(ctx, e, o, name, int64(i+1))
		switch {
		case errors.Is(err, errSkipped):
			r.Skipped = strings.TrimPrefix(err.Error(), errSkipped.Error()+": ")
			fmt.Fprintf(os.Stderr, "%-12s skipped: %s\n", name, r.Skipped)
		case err != nil:
			return nil, fmt.Errorf("%s: %w", name, err)
		default:
			r.Orders, r.StockLeft, r.Duplicates, r.Failures = tally.Orders, tally.StockLeft, tally.Duplicates, res.Failures
			r.Oversold = max(tally.Orders-o.stock, 0)
			r.OrdersPerS = float64(res.Orders) / res.Elapsed.Seconds()
			r.P50ms = float64(res.Percentile(50)) / 1e6
			r.P99ms = float64(res.Percentile(99)) / 1e6
		}
		rows = append(rows, r)
	}
	for i := range rows {
		for _, a := range rows {
			if a.Strategy == "atomic" && a.OrdersPerS > 0 && rows[i].Skipped == "" {
				rows[i].VsAtomic = rows[i].OrdersPerS / a.OrdersPerS
			}
		}
	}
	return rows, nil
}

var errSkipped = errors.New("skipped")

// sale runs one strategy's sale, in this process or spread over workers.
func sale(ctx context.Context, e *env, o options, name string, goods int64) (res seckill.Result, tally seckill.Tally, err error) {
	s, err := e.strategy(name, o)
	if err != nil {
		return res, tally, fmt.Errorf("%w: %v", errSkipped, err)
	}
	defer func() { err = errors.Join(err, s.Close(context.Background())) }()
	if err := seckill.Reset(ctx, e.db, s, goods, o.stock); err != nil {
		return res, tally, fmt.Errorf("%w (run with --migrate to create the tables)", err)
	}
	if o.procs == 1 {
		res = seckill.Sell(ctx, s, goods, seckill.Users(1, o.users), o.buyers, progress(name, o.users))
	} else if res, err = spread(o, name, goods); err != nil {
		return res, tally, err
	}
	fmt.Fprintf(os.Stderr, "%s%-12s %d/%d buyers done in %v\n", lineStart(), name, o.users, o.users, res.Elapsed.Round(time.Millisecond))
	tally, err = seckill.Count(ctx, e.db, s, goods)
	return res, tally, err
}

// stderrIsTerminal is whether progress lines may be redrawn in place: a
// log file or a CI log gets only each strategy's final line.
var stderrIsTerminal = func() bool {
	fi, err := os.Stderr.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}()

// lineStart returns to the start of a progress line on a terminal.
func lineStart() string {
	if stderrIsTerminal {
		return "\r"
	}
	return ""
}

// progress redraws a strategy's progress line on a terminal, and does
// nothing elsewhere.
func progress(name string, total int) func(int) {
	if !stderrIsTerminal {
		return nil
	}
	var mu sync.Mutex
	last := time.Now()
	return func(done int) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) > 200*time.Millisecond {
			last = time.Now()
			fmt.Fprintf(os.Stderr, "\r%-12s %d/%d buyers done", name, done, total)
		}
	}
}

// workerResult is what a worker process prints.
type workerResult struct {
	Orders, SoldOut, Duplicates, Failures int
	FirstError                            string
	LatenciesNS                           []int64
}

// spread runs the users over o.procs worker processes of this program.
func spread(o options, name string, goods int64) (seckill.Result, error) {
	self, err := os.Executable()
	if err != nil {
		return seckill.Result{}, err
	}
	per := (o.users + o.procs - 1) / o.procs
	results := make([]workerResult, o.procs)
	errs := make([]error, o.procs)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range o.procs {
		first := int64(1 + i*per)
		n := min(per, o.users-i*per)
		if n <= 0 {
			continue
		}
		cmd := exec.Command(self, "worker", "--db", o.db, "--strategy", name, "--goods", strconv.FormatInt(goods, 10),
			"--first-user", strconv.FormatInt(first, 10), "--users", strconv.Itoa(n),
			"--buyers", strconv.Itoa(max(1, o.buyers/o.procs)), "--segments", strconv.Itoa(o.segments), "--stock", strconv.Itoa(o.stock))
		cmd.Stderr = os.Stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := cmd.Output()
			if err != nil {
				errs[i] = fmt.Errorf("worker %d: %w", i, err)
				return
			}
			errs[i] = json.Unmarshal(out, &results[i])
		}()
	}
	wg.Wait()
	res := seckill.Result{Elapsed: time.Since(start)}
	for i, w := range results {
		if errs[i] != nil {
			return res, errs[i]
		}
		res.Orders += w.Orders
		res.SoldOut += w.SoldOut
		res.Duplicates += w.Duplicates
		res.Failures += w.Failures
		for _, l := range w.LatenciesNS {
			res.Latencies = append(res.Latencies, time.Duration(l))
		}
	}
	slices.Sort(res.Latencies)
	return res, nil
}

func runWorker(o options, w workerSpec) (err error) {
	ctx := context.Background()
	e, err := open(ctx, o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, e.close()) }()
	s, err := e.strategy(w.strategyID, o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, s.Close(context.Background())) }()
	res := seckill.Sell(ctx, s, w.goods, seckill.Users(w.firstUser, w.users), o.buyers, nil)
	out := workerResult{Orders: res.Orders, SoldOut: res.SoldOut, Duplicates: res.Duplicates, Failures: res.Failures}
	if res.FirstError != nil {
		out.FirstError = res.FirstError.Error()
	}
	for _, l := range res.Latencies {
		out.LatenciesNS = append(out.LatenciesNS, int64(l))
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// inventoryCommand runs seckill serve or load and returns the exit status.
func inventoryCommand(cmd string, args []string) int {
	var err error
	if cmd == "serve" {
		var o serveOptions
		if o, err = parseServe(args); err == nil {
			if err = serve(o); err != nil {
				fmt.Fprintln(os.Stderr, "seckill serve:", err)
				return 1
			}
			return 0
		}
	} else {
		var o loadOptions
		if o, err = parseLoad(args); err == nil {
			if err = load(o); err != nil {
				fmt.Fprintln(os.Stderr, "seckill load:", err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(os.Stderr, "seckill %s: %v\n", cmd, err)
	return 2
}

// printJSON prints v, indented, on stdout.
func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseFlags parses args into fs and refuses a positional argument;
// --help prints usage and the flags on stdout and exits 0.
func parseFlags(fs *flag.FlagSet, args []string, usage string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stdout)
			fmt.Println(usage)
			fs.PrintDefaults()
			os.Exit(0)
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}
