// Package testenv finds the servers integration tests run against.
//
// The environment names the servers; each defaults to the local server on
// its standard port:
//
//	DLOCK_PG_DSN      postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//	DLOCK_MYSQL_DSN   root@tcp(127.0.0.1:3306)/test?parseTime=true
//	DLOCK_REDIS_ADDR  127.0.0.1:6379
//	DLOCK_ZK_ADDRS    127.0.0.1:2181 (comma-separated)
//
// A server that does not answer skips the test with one uniform message, or
// fails it when DLOCK_REQUIRE_SERVICES=1 (set by make test and CI). With no
// server reachable and a Docker engine running, a container is started
// instead (see docker.go).
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"

	"github.com/dlockhq/dlock/internal/servers"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
)

// Defaults for the env contract (see package servers).
const (
	DefaultPostgresDSN = servers.DefaultPostgresDSN
	DefaultMySQLDSN    = servers.DefaultMySQLDSN
	DefaultRedisAddr   = servers.DefaultRedisAddr
	DefaultZKAddrs     = servers.DefaultZKAddrs
)

// Required reports whether a missing server fails the test instead of
// skipping it.
func Required() bool { return os.Getenv("DLOCK_REQUIRE_SERVICES") == "1" }

// Unavailable skips t, or fails it when services are required, with the
// one message every test uses for a missing server.
func Unavailable(t testing.TB, what, where, envVar string, err error) {
	t.Helper()
	msg := fmt.Sprintf("dlock: %s not reachable at %s (%v); start it with scripts/services.sh up or set %s", what, where, err, envVar)
	if Required() {
		t.Fatal(msg + " [DLOCK_REQUIRE_SERVICES=1]")
	}
	t.Skip(msg)
}

// PostgresDSN is the PostgreSQL DSN tests use.
func PostgresDSN() string { return servers.PostgresDSN() }

// MySQLDSN is the MySQL/MariaDB DSN tests use.
func MySQLDSN() string { return servers.MySQLDSN() }

var (
	dockerMu  sync.Mutex
	dockerDSN = map[string]string{}
)

// Postgres opens the test PostgreSQL database; t.Cleanup closes it.
func Postgres(t testing.TB) *sql.DB {
	return open(t, "PostgreSQL", "pgx", "DLOCK_PG_DSN")
}

// MySQL opens the test MySQL/MariaDB database; t.Cleanup closes it.
func MySQL(t testing.TB) *sql.DB {
	return open(t, "MySQL/MariaDB", "mysql", "DLOCK_MYSQL_DSN")
}

// DSN returns the DSN Postgres or MySQL would open for driver ("pgx" or
// "mysql"), after any Docker fallback.
func DSN(driver string) string {
	dockerMu.Lock()
	defer dockerMu.Unlock()
	if d, ok := dockerDSN[driver]; ok {
		return d
	}
	if driver == "pgx" {
		return PostgresDSN()
	}
	return MySQLDSN()
}

func open(t testing.TB, what, driver, envVar string) *sql.DB {
	t.Helper()
	dsn := DSN(driver)
	db, err := sql.Open(driver, dsn)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = db.PingContext(ctx)
		cancel()
		if err != nil {
			db.Close()
		}
	}
	if err != nil {
		alt, derr := dockerFallback(driver)
		if derr != nil {
			Unavailable(t, what, Redact(dsn), envVar, fmt.Errorf("%v; docker fallback: %v", err, derr))
		}
		dockerMu.Lock()
		dockerDSN[driver] = alt
		dockerMu.Unlock()
		if db, err = sql.Open(driver, alt); err != nil {
			t.Fatal(err)
		}
	}
	// database/sql keeps 2 idle connections by default: concurrent tests
	// would open a new connection (on PostgreSQL, a new process) for most
	// statements. Keep as many as a test runs at once, as an application
	// sized for its load would.
	db.SetMaxIdleConns(64)
	t.Cleanup(func() { db.Close() })
	return db
}

// Redact hides a password in a DSN so it never reaches a log.
func Redact(dsn string) string { return servers.Redact(dsn) }

// RedisAddr returns the test Redis address after checking it answers.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := servers.RedisAddr()
	if err := dial(addr); err != nil {
		Unavailable(t, "Redis", addr, "DLOCK_REDIS_ADDR", err)
	}
	return addr
}

// ZKAddrs returns the test ZooKeeper addresses after checking one answers.
func ZKAddrs(t testing.TB) []string {
	t.Helper()
	addrs := servers.ZKAddrs()
	var err error
	for _, a := range addrs {
		if err = dial(a); err == nil {
			return addrs
		}
	}
	Unavailable(t, "ZooKeeper", strings.Join(addrs, ","), "DLOCK_ZK_ADDRS", err)
	return nil
}

func dial(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

// PGQueryModes are pgx's default_query_exec_mode values other than its
// default (cache_statement): every SQL package must work under each, as
// users behind a pooler set simple_protocol or exec.
var PGQueryModes = []string{"cache_describe", "describe_exec", "exec", "simple_protocol"}

// PostgresMode returns an opener of the test PostgreSQL database whose
// connections use pgx's default_query_exec_mode mode.
func PostgresMode(mode string) func(testing.TB) *sql.DB {
	return func(t testing.TB) *sql.DB {
		t.Helper()
		Postgres(t) // reports an absent server, and finds any fallback DSN names
		u, err := url.Parse(DSN("pgx"))
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("default_query_exec_mode", mode)
		u.RawQuery = q.Encode()
		return Open(t, "pgx", u.String())
	}
}

// PgBouncerPorts are the loopback ports of scripts/services.sh pgbouncer's
// PgBouncers in front of the test PostgreSQL, by pool_mode.
var PgBouncerPorts = map[string]string{"session": "6432", "transaction": "6433", "statement": "6434"}

// PgBouncerDSN returns the DSN of the test database through the
// PgBouncer of pool_mode pooling, with pgx's default_query_exec_mode
// queryMode ("" for pgx's default). It starts the PgBouncers (Debian's
// pgbouncer package, installed when missing) unless they answer.
func PgBouncerDSN(t testing.TB, pooling, queryMode string) string {
	t.Helper()
	port, ok := PgBouncerPorts[pooling]
	if !ok {
		t.Fatalf("no PgBouncer of pool_mode %q", pooling)
	}
	Postgres(t)
	addr := "127.0.0.1:" + port
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
	} else {
		startPgBouncers(t)
	}
	u, err := url.Parse(DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	q := u.Query()
	if queryMode != "" {
		q.Set("default_query_exec_mode", queryMode)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// FreshPgBouncerDSN is PgBouncerDSN to a database of its own, made for
// t and dropped when it ends. (PgBouncer drops a search_path sent at
// startup, so Fresh's schemas do not reach through it.)
func FreshPgBouncerDSN(t testing.TB, pooling, queryMode string) string {
	t.Helper()
	dsn := PgBouncerDSN(t, pooling, queryMode)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "dlock_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := Postgres(t).ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := Postgres(t).ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

var (
	pgbouncerOnce sync.Once
	pgbouncerErr  error
)

func startPgBouncers(t testing.TB) {
	t.Helper()
	pgbouncerOnce.Do(func() {
		root, err := ModuleRoot()
		if err == nil {
			var out []byte
			if out, err = exec.Command("bash", filepath.Join(root, "scripts", "services.sh"), "pgbouncer").CombinedOutput(); err != nil {
				err = fmt.Errorf("%v: %s", err, out)
			}
		}
		pgbouncerErr = err
	})
	if pgbouncerErr != nil {
		Unavailable(t, "PgBouncer", "127.0.0.1:6432-6434", "scripts/services.sh pgbouncer", pgbouncerErr)
	}
}
