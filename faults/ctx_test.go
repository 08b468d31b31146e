package faults_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/tablelock"
)

// callCtx is the ctx every call gets under a fault, and callBound what it
// may take at most: the ctx, dlock.CancelMargin, and room for a loaded
// 2-core machine under the race detector. A call that waits for a driver
// timeout (seconds) or for ever fails it.
const (
	callCtx   = 300 * time.Millisecond
	callBound = callCtx + dlock.CancelMargin + 700*time.Millisecond
)

// faulty is a Locker under one fault: apply starts the fault, heal ends it.
type faulty struct {
	locker      dlock.Locker
	apply, heal func()
}

type ctxLocker interface {
	dlock.Locker
	dlock.Inspector
	Close(context.Context) error
}

// TestCallsReturnWithinCtx makes every call (Lock, TryLock, Inspect, a
// lease's Refresh and Unlock) with a 300ms ctx while the server is
// frozen, the link is blackholed, or the pool is exhausted, on every
// backend, and logs how long each took (the table in docs/faults.md).
func TestCallsReturnWithinCtx(t *testing.T) {
	type setup struct {
		backend, fault string
		make           func(t *testing.T) faulty
	}
	var setups []setup
	sqlBackends := []struct {
		name   string
		driver string
		newL   func(*sql.DB, ...dlock.Option) (ctxLocker, error)
	}{
		{"tablelock/postgres", "pgx", func(db *sql.DB, o ...dlock.Option) (ctxLocker, error) { return tablelock.New(db, o...) }},
		{"tablelock/mysql", "mysql", func(db *sql.DB, o ...dlock.Option) (ctxLocker, error) { return tablelock.New(db, o...) }},
		{"advisory/postgres", "pgx", func(db *sql.DB, o ...dlock.Option) (ctxLocker, error) { return advisory.New(db, o...) }},
		{"advisory/mysql", "mysql", func(db *sql.DB, o ...dlock.Option) (ctxLocker, error) { return advisory.New(db, o...) }},
	}
	for _, b := range sqlBackends {
		open := func(t *testing.T, dsn string) *sql.DB {
			db, err := sql.Open(b.driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		locker := func(t *testing.T, db *sql.DB) dlock.Locker {
			l, err := b.newL(db, dlock.WithTTL(2*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return testenv.Closing(t, l)
		}
		server := "postgres"
		if b.driver == "mysql" {
			server = "mysql"
		}
		setups = append(setups,
			setup{b.name, "blackholed link", func(t *testing.T) faulty {
				testenv.Migrated(t, map[string]func(testing.TB) *sql.DB{"pgx": testenv.Postgres, "mysql": testenv.MySQL}[b.driver])
				p := testenv.NewProxy(t, upstream(t, server))
				return faulty{locker(t, open(t, viaDSN(t, b.driver, p.Addr()))), p.Blackhole, p.Restore}
			}},
			setup{b.name, "frozen server", func(t *testing.T) faulty {
				s := map[string]func(testing.TB) *testenv.SQLServer{"pgx": testenv.PostgresServer, "mysql": testenv.MariaDBServer}[b.driver](t)
				migrate(t, s)
				return faulty{locker(t, open(t, s.DSN)), s.Freeze, s.Thaw}
			}},
			setup{b.name, "exhausted pool", func(t *testing.T) faulty {
				db := testenv.Migrated(t, map[string]func(testing.TB) *sql.DB{"pgx": testenv.Postgres, "mysql": testenv.MySQL}[b.driver])
				db.SetMaxOpenConns(2) // one for an advisory lease, one to take away
				var hogged []*sql.Conn
				return faulty{locker(t, db), func() {
					for db.Stats().InUse < 2 {
						c, err := db.Conn(context.Background())
						if err != nil {
							t.Fatal(err)
						}
						hogged = append(hogged, c)
					}
				}, func() {
					for _, c := range hogged {
						c.Close()
					}
				}}
			}},
		)
	}
	redisLocker := func(t *testing.T, addr string) dlock.Locker {
		c := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { c.Close() })
		l, err := redislock.New(c, dlock.WithTTL(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return testenv.Closing(t, l)
	}
	setups = append(setups,
		setup{"redis", "blackholed link", func(t *testing.T) faulty {
			p := testenv.NewProxy(t, testenv.RedisAddr(t))
			return faulty{redisLocker(t, p.Addr()), p.Blackhole, p.Restore}
		}},
		setup{"redis", "frozen server", func(t *testing.T) faulty {
			s := testenv.RedisServers(t, 1)[0]
			return faulty{redisLocker(t, s.Addr), s.Freeze, s.Thaw}
		}},
		setup{"zk", "blackholed link", func(t *testing.T) faulty {
			p := testenv.NewProxy(t, testenv.ZKAddrs(t)[0])
			conn := testenv.ZK(t, []string{p.Addr()}, 4*time.Second)
			l, err := zklock.New(conn, "/dlock-ctx", dlock.WithTTL(4*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			return faulty{testenv.Closing(t, l), p.Blackhole, p.Restore}
		}},
	)

	var table []string
	for _, s := range setups {
		t.Run(s.backend+"/"+s.fault, func(t *testing.T) {
			f := s.make(t)
			ctx := context.Background()
			name := dlocktest.Name(t)
			lease, err := f.locker.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			f.apply()
			healed := false
			defer func() {
				if !healed {
					f.heal()
				}
			}()
			row := []string{s.backend, s.fault}
			calls := []struct {
				name string
				call func(ctx context.Context) error
			}{
				{"Lock", func(ctx context.Context) error { return unlockIfGot(f.locker.Lock(ctx, name+".other")) }},
				{"TryLock", func(ctx context.Context) error { return unlockIfGot(f.locker.TryLock(ctx, name+".other")) }},
				{"Inspect", func(ctx context.Context) error {
					_, _, err := f.locker.(dlock.Inspector).Inspect(ctx, name)
					return err
				}},
				{"Refresh", lease.Refresh},
				{"Unlock", lease.Unlock},
			}
			for _, c := range calls {
				cctx, cancel := context.WithTimeout(ctx, callCtx)
				start := time.Now()
				err := c.call(cctx)
				took := time.Since(start)
				cancel()
				row = append(row, took.Round(time.Millisecond).String())
				if took > callBound {
					t.Errorf("%s under %s took %v with a %v ctx (err %v)", c.name, s.fault, took, callCtx, err)
				}
			}
			f.heal()
			healed = true
			table = append(table, "| "+strings.Join(row, " | ")+" |")
		})
	}
	t.Logf("call × backend × fault, time to return with a %v ctx:\n| backend | fault | Lock | TryLock | Inspect | Refresh | Unlock |\n|---|---|---|---|---|---|---|\n%s",
		callCtx, strings.Join(table, "\n"))
}

// unlockIfGot gives back a lease a call got, and returns the call's error.
func unlockIfGot(l dlock.Lease, err error) error {
	if err == nil {
		return errors.Join(errors.New("acquired under a fault"), l.Unlock(context.Background()))
	}
	return err
}

// viaDSN is the DSN of driver's test database through addr.
func viaDSN(t *testing.T, driver, addr string) string {
	if driver == "mysql" {
		cfg, err := mysql.ParseDSN(testenv.DSN("mysql"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Addr = addr
		return cfg.FormatDSN()
	}
	u, err := url.Parse(testenv.DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	return u.String()
}
