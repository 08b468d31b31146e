package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/servers"
	"github.com/dlockhq/dlock/inventory"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/schedlock"
	"github.com/dlockhq/dlock/tablelock"
)

// serveOptions are the flags of seckill serve.
type serveOptions struct {
	db       string
	addr     string
	redis    string
	strategy inventory.Strategy
	ttl      time.Duration
	sweep    time.Duration
	adm      inventory.Admission
	conns    int
	migrate  bool
	// redisPrefix is the redis strategy's key prefix (inventory.WithRedis).
	redisPrefix string
}

const serveUsage = "usage: seckill serve [--db postgres|mysql] [--addr 127.0.0.1:8080] [--strategy combining|atomic|redis|buckets] [--redis 127.0.0.1:6379] [--redis-prefix inventory:] [--ttl 10m] [--sweep 1s] [--per-user 4] [--per-item 1024] [--conns 16] [--migrate]\n" +
	"environment: " + servers.PostgresEnv + " (--db postgres's DSN, default " + servers.DefaultPostgresDSN + "), " +
	servers.MySQLEnv + " (--db mysql's, default " + servers.DefaultMySQLDSN + "), " + servers.RedisEnv + " (--redis's default)\n" +
	"API: POST /items {sku, initial, per_user_limit}; GET /items/{sku}; POST /reservations {request_id, user_id, sku, qty}; GET /reservations/{id}; POST /reservations/{id}/confirm; DELETE /reservations/{id}"

// strategyOf reads an inventory strategy's name.
func strategyOf(name string) (inventory.Strategy, error) {
	for _, s := range []inventory.Strategy{inventory.Combining, inventory.Atomic, inventory.Redis, inventory.Buckets} {
		if s.String() == name {
			return s, nil
		}
	}
	return 0, fmt.Errorf("unknown inventory strategy %q (combining, atomic, redis or buckets)", name)
}

func parseServe(args []string) (serveOptions, error) {
	fs := flag.NewFlagSet("seckill serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o serveOptions
	var strategy string
	fs.StringVar(&o.db, "db", "postgres", "postgres or mysql")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:8080", "address to listen on (port 0: any)")
	fs.StringVar(&strategy, "strategy", "combining", "combining, atomic, redis or buckets (an item's buckets are made when it is added; every strategy reserves a bucketed item from them)")
	fs.StringVar(&o.redis, "redis", servers.RedisAddr(), "the redis strategy's Redis server ($"+servers.RedisEnv+")")
	fs.StringVar(&o.redisPrefix, "redis-prefix", "inventory:", "the redis strategy's keys' prefix: services whose inventories are in different databases and share one Redis need different ones")
	fs.DurationVar(&o.ttl, "ttl", 10*time.Minute, "how long a reservation waits for its confirm")
	fs.DurationVar(&o.sweep, "sweep", time.Second, "how often expired reservations are swept (on one process of the fleet); they are back within --ttl + --sweep + max(3 × --sweep, 2s), a killed process included")
	fs.IntVar(&o.adm.PerUser, "per-user", 4, "requests of one user in flight before 429")
	fs.IntVar(&o.adm.PerItem, "per-item", 1024, "reservations of one item in flight before 429")
	fs.IntVar(&o.conns, "conns", 16, "database connections")
	fs.BoolVar(&o.migrate, "migrate", false, "apply dlock's and the inventory's migrations first")
	if err := parseFlags(fs, args, serveUsage); err != nil {
		return o, err
	}
	var err error
	switch {
	case o.db != "postgres" && o.db != "mysql":
		return o, fmt.Errorf("--db must be postgres or mysql, got %q", o.db)
	case o.ttl < time.Millisecond:
		return o, fmt.Errorf("--ttl must be at least 1ms, got %v", o.ttl)
	case o.sweep <= 0:
		return o, fmt.Errorf("--sweep must be positive, got %v", o.sweep)
	case o.adm.PerUser <= 0 || o.adm.PerItem <= 0:
		return o, errors.New("--per-user and --per-item must be positive")
	case o.conns <= 0:
		return o, fmt.Errorf("--conns must be positive, got %d", o.conns)
	}
	if err := checkRedisAddr(o.redis); err != nil {
		return o, err
	}
	o.strategy, err = strategyOf(strategy)
	return o, err
}

// openDB opens the database of --db with conns connections, checks that
// it answers and, with migrate, applies dlock's and the inventory's
// migrations.
func openDB(ctx context.Context, db string, conns int, migrate bool) (*sql.DB, error) {
	driver, dsn, env := "pgx", servers.PostgresDSN(), servers.PostgresEnv
	if db == "mysql" {
		driver, dsn, env = "mysql", servers.MySQLDSN(), servers.MySQLEnv
	}
	d, err := sql.Open(driver, dsn)
	if err != nil {
		return nil, err
	}
	d.SetMaxOpenConns(conns)
	d.SetMaxIdleConns(conns)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := d.PingContext(pctx); err != nil {
		_ = d.Close() // unreachable: the ping's error is the one to report
		return nil, fmt.Errorf("%s not reachable at %s: %v (start it with scripts/services.sh up, or set %s)", db, servers.Redact(dsn), err, env)
	}
	if migrate {
		if err := errors.Join(migrations.Up(ctx, d), inventory.Migrate(ctx, d)); err != nil {
			return nil, errors.Join(err, d.Close())
		}
	}
	return d, nil
}

// checkRedisAddr refuses a --redis that is not host:port.
func checkRedisAddr(addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--redis must be host:port, got %q", addr)
	}
	return nil
}

// openRedis connects to the Redis server at addr and checks that it
// answers.
func openRedis(ctx context.Context, addr string) (*redis.Client, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close() // unreachable: the ping's error is the one to report
		return nil, fmt.Errorf("redis not reachable at %s: %v (start it with scripts/services.sh up, or set %s)", addr, err, servers.RedisEnv)
	}
	return c, nil
}

// sweeperTTL is the TTL of the lock-table lock the fleet's sweep runs
// under (renewed while a sweep runs): the longest a sweeping process that
// is killed holds the next sweeps back. Expired reservations are back
// within --ttl + --sweep + sweeperTTL, a kill included.
func sweeperTTL(sweep time.Duration) time.Duration {
	return min(dlock.DefaultTTL, max(3*sweep, 2*time.Second))
}

// serve runs the inventory service until SIGINT or SIGTERM: the HTTP API
// and the fleet's sweeper, which runs on one serving process at a time
// under a lock-table schedlock slot.
func serve(o serveOptions) (err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	db, err := openDB(ctx, o.db, o.conns, o.migrate)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	opts := []inventory.Option{inventory.WithStrategy(o.strategy), inventory.WithReservationTTL(o.ttl)}
	if o.strategy == inventory.Redis {
		var rc *redis.Client
		if rc, err = openRedis(ctx, o.redis); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, rc.Close()) }()
		opts = append(opts, inventory.WithRedis(rc, o.redisPrefix))
	}
	s, err := inventory.New(db, opts...)
	if err != nil {
		return err
	}
	locker, err := tablelock.New(db, dlock.WithTTL(sweeperTTL(o.sweep)))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, locker.Close(context.Background())) }()
	runner, err := schedlock.New(locker)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: inventory.NewHandler(s, o.adm), ReadHeaderTimeout: 5 * time.Second}
	swept := make(chan error, 1)
	go func() {
		swept <- s.RunSweeper(ctx, runner, o.sweep, func(err error) { fmt.Fprintln(os.Stderr, "seckill serve: sweep:", err) })
	}()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Printf("seckill serve: %s inventory on http://%s\n", o.strategy, ln.Addr())
	select {
	case err = <-served:
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = srv.Shutdown(sctx)
	}
	stop()
	if serr := <-swept; !errors.Is(serr, context.Canceled) {
		err = errors.Join(err, serr)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
