package seckill_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/seckill"
	"github.com/dlockhq/dlock/tablelock"
)

var goodsSeq atomic.Int64

func init() { goodsSeq.Store(time.Now().UnixNano() % 1e9 * 100) }

// database opens a fresh schema with dlock's and seckill's migrations.
func database(t *testing.T, driver string) *sql.DB {
	t.Helper()
	db, _ := databases(t, driver)
	return db
}

// databases opens a fresh schema twice: a pool for the sale's data and one
// for advisory locks, which pin a connection per waiter and holder. On one
// pool, waiters would take every connection and the holder could not
// finish its purchase. PostgreSQL allows 100 connections, shared with the
// other packages' tests, so both pools are capped.
func databases(t *testing.T, driver string) (data, locks *sql.DB) {
	t.Helper()
	dsn := testenv.FreshDSN(t, driver)
	db := testenv.Open(t, driver, dsn)
	db.SetMaxOpenConns(24)
	locks = testenv.Open(t, driver, dsn)
	locks.SetMaxOpenConns(24)
	ctx := context.Background()
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := seckill.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return db, locks
}

// strategies builds every strategy over db; lock-based ones share one
// Locker between every buyer goroutine, as a service would.
func strategies(t *testing.T, db, locks *sql.DB) map[string]func() seckill.Strategy {
	t.Helper()
	must := func(s seckill.Strategy, err error) seckill.Strategy {
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 128})
	t.Cleanup(func() { rc.Close() })
	zkConn := testenv.ZK(t, testenv.ZKAddrs(t), 10*time.Second)
	return map[string]func() seckill.Strategy{
		"atomic":      func() seckill.Strategy { return must(seckill.Atomic(db)) },
		"pessimistic": func() seckill.Strategy { return must(seckill.Pessimistic(db)) },
		"optimistic":  func() seckill.Strategy { return must(seckill.Optimistic(db)) },
		"tablelock": func() seckill.Strategy {
			return must(seckill.Locked(db, "tablelock", perBuyer(t, func() (dlock.Locker, error) { return tablelock.New(db) })))
		},
		"advisory": func() seckill.Strategy {
			return must(seckill.Locked(db, "advisory", perBuyer(t, func() (dlock.Locker, error) { return advisory.New(locks) })))
		},
		"redis": func() seckill.Strategy {
			return must(seckill.Locked(db, "redis", perBuyer(t, func() (dlock.Locker, error) { return redislock.New(rc) })))
		},
		"zk": func() seckill.Strategy {
			return must(seckill.Locked(db, "zk", perBuyer(t, func() (dlock.Locker, error) { return zklock.New(zkConn, "/dlock-seckill") })))
		},
		"segmented": func() seckill.Strategy {
			return must(seckill.Segmented(db, 4, perBuyer(t, func() (dlock.Locker, error) { return redislock.New(rc) })))
		},
	}
}

// perBuyer returns one Locker for every buyer goroutine.
func perBuyer(t *testing.T, mk func() (dlock.Locker, error)) dlock.Locker {
	l, err := mk()
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l.(interface {
		dlock.Locker
		Close(context.Context) error
	}))
}

func TestEveryStrategySellsExactly(t *testing.T) {
	const stock, users, buyers = 100, 160, 64
	for _, driver := range []string{"pgx", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			db, locks := databases(t, driver)
			ctx := context.Background()
			for name, mk := range strategies(t, db, locks) {
				t.Run(name, func(t *testing.T) {
					goods := goodsSeq.Add(1)
					segments := 0
					if name == "segmented" {
						segments = 4
					}
					if err := seckill.Reset(ctx, db, goods, stock, segments); err != nil {
						t.Fatal(err)
					}
					res := seckill.Sell(ctx, mk(), goods, seckill.Users(1, users), buyers, nil)
					if res.Failures > 0 {
						t.Fatalf("%d failures, first: %v", res.Failures, res.FirstError)
					}
					tally, err := seckill.Count(ctx, db, goods, segments > 0)
					if err != nil {
						t.Fatal(err)
					}
					if res.Orders != stock || tally.Orders != stock || tally.StockLeft != 0 || tally.Duplicates != 0 {
						t.Fatalf("sold %d (db: %d orders, %d left, %d duplicates), want exactly %d", res.Orders, tally.Orders, tally.StockLeft, tally.Duplicates, stock)
					}
					if res.SoldOut != users-stock {
						t.Fatalf("%d buyers told sold out, want %d", res.SoldOut, users-stock)
					}
					// Buying again is refused, not doubled.
					if _, err := mk().PlaceOrder(ctx, 1, goods); !errors.Is(err, seckill.ErrSoldOut) && !errors.Is(err, seckill.ErrDuplicateOrder) {
						t.Fatalf("second purchase by user 1: %v", err)
					}
				})
			}
		})
	}
}

// Without a lock the item is oversold: shown, not asserted (it depends on
// scheduling).
func TestNoneOversells(t *testing.T) {
	db := database(t, "pgx")
	ctx := context.Background()
	goods := goodsSeq.Add(1)
	if err := seckill.Reset(ctx, db, goods, 100, 0); err != nil {
		t.Fatal(err)
	}
	s, _ := seckill.None(db)
	res := seckill.Sell(ctx, s, goods, seckill.Users(1, 300), 64, nil)
	tally, _ := seckill.Count(ctx, db, goods, false)
	t.Logf("no lock: %d orders for a stock of 100 (%d oversold), stock shows %d", tally.Orders, max(tally.Orders-100, 0), tally.StockLeft)
	_ = res
}

// A holder whose lease expires mid-purchase (paused past its TTL) is
// refused by the fencing token after another buyer took the lock and
// wrote; the sale stays exact.
func TestFencingRefusesExpiredHolder(t *testing.T) {
	for _, driver := range []string{"pgx", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			db := database(t, driver)
			ctx := context.Background()
			goods := goodsSeq.Add(1)
			if err := seckill.Reset(ctx, db, goods, 5, 0); err != nil {
				t.Fatal(err)
			}
			slowLocker, err := tablelock.New(db, dlock.WithTTL(500*time.Millisecond), dlock.WithoutAutoRenew())
			if err != nil {
				t.Fatal(err)
			}
			testenv.Closing(t, slowLocker)
			slow, _ := seckill.Locked(db, "tablelock", slowLocker, seckill.WithHoldDelay(1500*time.Millisecond))
			fastLocker, _ := tablelock.New(db)
			testenv.Closing(t, fastLocker)
			fast, _ := seckill.Locked(db, "tablelock", fastLocker)

			slowErr := make(chan error, 1)
			go func() {
				_, err := slow.PlaceOrder(ctx, 1, goods)
				slowErr <- err
			}()
			time.Sleep(100 * time.Millisecond) // the slow buyer holds the lock
			if _, err := fast.PlaceOrder(ctx, 2, goods); err != nil {
				t.Fatalf("buyer after the expiry: %v", err)
			}
			if err := <-slowErr; !errors.Is(err, seckill.ErrStaleToken) {
				t.Fatalf("expired holder's purchase: %v, want ErrStaleToken", err)
			}
			tally, _ := seckill.Count(ctx, db, goods, false)
			if tally.Orders != 1 || tally.StockLeft != 4 {
				t.Fatalf("%d orders, %d left; want 1 and 4", tally.Orders, tally.StockLeft)
			}
		})
	}
}
