package seckill_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/internal/testenv/etcdenv"
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

// servers are the registry's servers for the sale's db; every lock-based
// strategy gets a Locker of its own, shared by every buyer goroutine, as a
// service would.
func servers(t *testing.T, db, locks *sql.DB) seckill.Servers {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), PoolSize: 128})
	t.Cleanup(func() { rc.Close() })
	return seckill.Servers{DB: db, Locks: locks, Redis: rc, ZK: testenv.ZK(t, testenv.ZKAddrs(t), 10*time.Second),
		Etcd: etcdenv.Client(t, etcdenv.Endpoints()), Segments: 4}
}

// build builds the registered strategy e on srv; t.Cleanup closes it.
func build(t *testing.T, e seckill.Entry, srv seckill.Servers) seckill.Strategy {
	t.Helper()
	s, err := e.New(srv)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, s)
}

func TestEveryStrategySellsExactly(t *testing.T) {
	const stock, users, buyers = 100, 160, 64
	for _, driver := range []string{"pgx", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			db, locks := databases(t, driver)
			srv := servers(t, db, locks)
			ctx := context.Background()
			for _, e := range seckill.Strategies {
				if e.Name == "none" {
					continue // it oversells: TestNoneOversells
				}
				t.Run(e.Name, func(t *testing.T) {
					s := build(t, e, srv)
					if s.Name() != e.Name {
						t.Fatalf("strategy %q registered as %q", s.Name(), e.Name)
					}
					goods := goodsSeq.Add(1)
					if err := seckill.Reset(ctx, db, s, goods, stock); err != nil {
						t.Fatal(err)
					}
					res := seckill.Sell(ctx, s, goods, seckill.Users(1, users), buyers, nil)
					if res.Failures > 0 {
						t.Fatalf("%d failures, first: %v", res.Failures, res.FirstError)
					}
					tally, err := seckill.Count(ctx, db, s, goods)
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
					if _, err := s.PlaceOrder(ctx, 1, goods); !errors.Is(err, seckill.ErrSoldOut) && !errors.Is(err, seckill.ErrDuplicateOrder) {
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
	s, err := seckill.None(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := seckill.Reset(ctx, db, s, goods, 100); err != nil {
		t.Fatal(err)
	}
	res := seckill.Sell(ctx, s, goods, seckill.Users(1, 300), 64, nil)
	tally, err := seckill.Count(ctx, db, s, goods)
	if err != nil {
		t.Fatal(err)
	}
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
			if err := seckill.Reset(ctx, db, nil, goods, 5); err != nil {
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
			dlocktest.Eventually(t, func() bool { // the slow buyer holds the lock
				_, held, err := slowLocker.Inspect(ctx, "seckill:goods:"+strconv.FormatInt(goods, 10))
				return err == nil && held
			}, "the slow buyer holds the lock")
			if _, err := fast.PlaceOrder(ctx, 2, goods); err != nil {
				t.Fatalf("buyer after the expiry: %v", err)
			}
			if err := <-slowErr; !errors.Is(err, seckill.ErrStaleToken) {
				t.Fatalf("expired holder's purchase: %v, want ErrStaleToken", err)
			}
			tally, err := seckill.Count(ctx, db, nil, goods)
			if err != nil {
				t.Fatal(err)
			}
			if tally.Orders != 1 || tally.StockLeft != 4 {
				t.Fatalf("%d orders, %d left; want 1 and 4", tally.Orders, tally.StockLeft)
			}
		})
	}
}

func TestUsers(t *testing.T) {
	if got := seckill.Users(7, 3); !slices.Equal(got, []int64{7, 8, 9}) {
		t.Errorf("Users(7, 3) = %v, want [7 8 9]", got)
	}
	for _, n := range []int{0, -1} {
		if got := seckill.Users(1, n); len(got) != 0 {
			t.Errorf("Users(1, %d) = %v, want none", n, got)
		}
	}
}
