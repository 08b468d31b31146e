package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockhq/dlock"
	etcdlock "github.com/dlockhq/dlock/adapters/etcd"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/internal/servers"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/tablelock"
)

// locker is what every backend's Locker is to the command.
type locker interface {
	dlock.Locker
	dlock.Inspector
	dlock.Lister
	dlock.ForceReleaser
	Close(ctx context.Context) error
}

// target is the server a URL names, and the Locker on it.
type target struct {
	locker locker
	// db is the database of a postgres:// or mysql:// URL, nil for the
	// others, and dialect its dialect.
	db      *sql.DB
	dialect sqldialect.Dialect
	close   func()
}

// settings are the flags that shape a target.
type settings struct {
	url  string
	kind string // SQL lock: tablelock or advisory
	ttl  time.Duration
}

// connect opens s.url's server and a Locker on it. It does no I/O beyond
// what the client's constructor does; the first command's request tells
// whether the server answers.
func connect(s settings, stderr io.Writer) (*target, error) {
	if s.url == "" {
		return nil, errors.New("no server: give --url or set DLOCK_URL (postgres://, mysql://, redis://, zk://, etcd://)")
	}
	u, err := url.Parse(s.url)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the whole URL, password and all
		}
		return nil, fmt.Errorf("bad --url %q: %v", servers.Redact(s.url), err)
	}
	open, ok := openers[u.Scheme]
	if !ok {
		return nil, fmt.Errorf("bad --url %q: the scheme must be postgres, mysql, redis, zk or etcd", servers.Redact(s.url))
	}
	// Lease losses, failed renewals and evictions go to stderr.
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return open(u, s, []dlock.Option{dlock.WithTTL(s.ttl), dlock.WithLogger(log)})
}

// openers open a URL's server and Locker, by scheme. Closing a client is
// the command's last step: its error has nobody to tell.
var openers = map[string]func(u *url.URL, s settings, opts []dlock.Option) (*target, error){
	"postgres":   openPostgres,
	"postgresql": openPostgres,
	"mysql":      openMySQL,
	"redis":      openRedis,
	"rediss":     openRedis,
	"zk":         openZK,
	"etcd":       openEtcd,
}

func openPostgres(_ *url.URL, s settings, opts []dlock.Option) (*target, error) {
	db, err := sql.Open("pgx", s.url)
	if err != nil {
		return nil, err
	}
	return sqlTarget(db, sqldialect.Postgres, s.kind, opts)
}

func openMySQL(u *url.URL, s settings, opts []dlock.Option) (*target, error) {
	cfg := mysql.NewConfig()
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	cfg.Net, cfg.Addr, cfg.DBName, cfg.ParseTime = "tcp", u.Host, strings.TrimPrefix(u.Path, "/"), true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return nil, err
	}
	return sqlTarget(db, sqldialect.MySQL, s.kind, opts)
}

func openRedis(_ *url.URL, s settings, opts []dlock.Option) (*target, error) {
	o, err := redis.ParseURL(s.url)
	if err != nil {
		return nil, err
	}
	// Reads and writes end with the command's ctx (--timeout), not at
	// go-redis's own timeouts, and dlock makes its calls inline.
	o.ContextTimeoutEnabled = true
	c := redis.NewClient(o)
	l, err := redislock.New(c, opts...)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &target{locker: l, close: func() { _ = c.Close() }}, nil
}

func openZK(u *url.URL, s settings, opts []dlock.Option) (*target, error) {
	// The session outlasts the lease (see package zklock).
	conn, _, err := zk.Connect(strings.Split(u.Host, ","), s.ttl, zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	l, err := zklock.New(conn, orDefault(u.Path, "/dlock"), opts...)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &target{locker: l, close: conn.Close}, nil
}

func openEtcd(u *url.URL, _ settings, opts []dlock.Option) (*target, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(u.Host, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	l, err := etcdlock.New(c, orDefault(strings.TrimPrefix(u.Path, "/"), "dlock"), opts...)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &target{locker: l, close: func() { _ = c.Close() }}, nil
}

func sqlTarget(db *sql.DB, dialect sqldialect.Dialect, kind string, opts []dlock.Option) (*target, error) {
	var (
		l   locker
		err error
	)
	switch kind {
	case "tablelock":
		l, err = tablelock.New(db, opts...)
	case "advisory":
		l, err = advisory.New(db, opts...)
	default:
		err = fmt.Errorf("bad --lock %q: tablelock or advisory", kind)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return &target{locker: l, db: db, dialect: dialect, close: func() { _ = db.Close() }}, nil
}

func orDefault(s, def string) string {
	if s == "" || s == "/" {
		return def
	}
	return s
}

// shutdown closes the Locker, releasing what it holds, then the client.
func (t *target) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), dlock.DefaultReleaseTimeout)
	defer cancel()
	_ = t.locker.Close(ctx) // what it held expires at its TTL if this fails
	t.close()
}
