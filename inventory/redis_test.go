package inventory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/inventory"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/schedlock"
	"github.com/dlockhq/dlock/tablelock"
)

// redisStore is a redis-strategy inventory in a fresh database of driver,
// on a throwaway Redis server the test may restart or stop.
func redisStore(t *testing.T, driver string) (*inventory.Store, *sql.DB, *testenv.RedisServer) {
	t.Helper()
	srv := testenv.RedisServers(t, 1)[0]
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	db := database(t, driver)
	return store(t, db, inventory.WithStrategy(inventory.Redis), inventory.WithRedis(c, "")), db, srv
}

// buy has users from..to-1 reserve one unit each, 32 at a time, and
// returns how many got one; a rejection must be for sold out.
func buy(t *testing.T, s *inventory.Store, sku string, from, to int) int {
	t.Helper()
	var mu sync.Mutex
	got := 0
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for u := from; u < to; u++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := s.Reserve(context.Background(), fmt.Sprint(sku, u), int64(u), sku, 1)
			switch {
			case err == nil && res.State == inventory.Reserved:
				mu.Lock()
				got++
				mu.Unlock()
			case !errors.Is(err, inventory.ErrSoldOut):
				t.Errorf("user %d: %+v, %v", u, res, err)
			}
		}()
	}
	wg.Wait()
	return got
}

// gateIs fails t unless Redis's count of sku is want.
func gateIs(t *testing.T, s *inventory.Store, sku string, want int64) {
	t.Helper()
	n, ok, err := s.Gate(context.Background(), sku)
	if err != nil || !ok || n != want {
		t.Errorf("gate of %q = %d, %v, %v; want %d", sku, n, ok, err, want)
	}
}

// TestRedisLost: Redis restarts empty (no persistence) in the middle of a
// sale. The next Reserve rebuilds the count from the database, the sale
// ends with exactly the stock sold, and the count agrees with the
// database; a cancel gives the unit back to both.
func TestRedisLost(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			s, _, srv := redisStore(t, driver)
			ctx := ctxT(t)
			if err := s.AddItem(ctx, "hot", 100, 1); err != nil {
				t.Fatal(err)
			}
			first := buy(t, s, "hot", 1, 41)
			gateIs(t, s, "hot", 60)
			srv.Restart(t)
			if _, ok, err := s.Gate(ctx, "hot"); ok || err != nil {
				t.Fatalf("after the restart the count is there (%v, %v)", ok, err)
			}
			second := buy(t, s, "hot", 41, 301)
			if first != 40 || first+second != 100 {
				t.Errorf("%d then %d reserved; want 40 then 60", first, second)
			}
			it, err := s.Item(ctx, "hot")
			if err != nil {
				t.Fatal(err)
			}
			balanced(t, it)
			if it.Available != 0 || it.Reserved != 100 {
				t.Errorf("item %+v; want all 100 reserved", it)
			}
			gateIs(t, s, "hot", 0)
			res, err := s.Reserve(ctx, "hot1", 1, "hot", 1) // user 1's first request, retried
			if err != nil || res.State != inventory.Reserved {
				t.Fatalf("retry of hot1: %+v, %v", res, err)
			}
			if _, err := s.Cancel(ctx, res.ID); err != nil {
				t.Fatal(err)
			}
			gateIs(t, s, "hot", 1)
			if got := buy(t, s, "hot", 1000, 1010); got != 1 {
				t.Errorf("%d reserved the cancelled unit, want 1", got)
			}
		})
	}
}

// TestRedisWrongCount: a count above the database's stock sells no more
// than the database has, and is brought down; a count below it turns
// buyers away only until Reconcile, which does not count a grant the
// database has not recorded yet; a pending grant does not keep the
// database's units from buyers.
func TestRedisWrongCount(t *testing.T) {
	s, _, srv := redisStore(t, "pgx")
	ctx := ctxT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := s.AddItem(ctx, "hot", 10, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Reconcile(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
	gateIs(t, s, "hot", 10)
	if err := c.Set(ctx, "inventory:{hot}:stock", 1000, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := buy(t, s, "hot", 1, 51); got != 10 {
		t.Errorf("%d reserved on a count of 1000 over 10 units; want 10", got)
	}
	gateIs(t, s, "hot", 0)
	it, err := s.Item(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	balanced(t, it)
	if it.Reserved != 10 {
		t.Errorf("item %+v, want 10 reserved", it)
	}

	if err := s.AddItem(ctx, "low", 10, 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, "inventory:{low}:stock", 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := buy(t, s, "low", 1, 6); got != 0 {
		t.Errorf("%d reserved past a count of 0", got)
	}
	if err := s.GrantOnly(ctx, inventory.Request{RequestID: "pending", UserID: 99, SKU: "low", Qty: 3}); err == nil {
		t.Fatal("the gate granted on a count of 0")
	}
	if err := s.Reconcile(ctx, "low"); err != nil {
		t.Fatal(err)
	}
	gateIs(t, s, "low", 10)
	if err := s.GrantOnly(ctx, inventory.Request{RequestID: "pending", UserID: 99, SKU: "low", Qty: 3}); err != nil {
		t.Fatal(err)
	}
	if err := s.Reconcile(ctx, "low"); err != nil { // the grant is not the database's yet
		t.Fatal(err)
	}
	gateIs(t, s, "low", 7)
	// Past the 7, the count is short while a grant is pending: the
	// database decides, and it has the pending grant's units too (its
	// process never wrote it). What it grants comes off the count.
	if got := buy(t, s, "low", 6, 20); got != 10 {
		t.Errorf("%d reserved; want the database's 10", got)
	}
	gateIs(t, s, "low", -3)
	if err := s.Reconcile(ctx, "low"); err != nil {
		t.Fatal(err)
	}
	gateIs(t, s, "low", -3) // the pending grant's units, owed
	s.Abandon(0)            // its process is gone: the database rejects it, and the count is whole
	if err := s.Reconcile(ctx, "low"); err != nil {
		t.Fatal(err)
	}
	gateIs(t, s, "low", 0)
	it, err = s.Item(ctx, "low")
	if err != nil {
		t.Fatal(err)
	}
	balanced(t, it)
	if it.Reserved != 10 || it.Available != 0 {
		t.Errorf("item %+v, want 10 reserved", it)
	}
}

// TestRedisAbandoned: a process dies between the gate's grant and the
// database. Until the grant counts as abandoned Reconcile keeps its units
// out of the count; then it writes the grant to the database, which
// reserves it: the buyer's retry finds it.
func TestRedisAbandoned(t *testing.T) {
	s, _, _ := redisStore(t, "mysql")
	ctx := ctxT(t)
	if err := s.AddItem(ctx, "hot", 10, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Reconcile(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
	r := inventory.Request{RequestID: "orphan", UserID: 7, SKU: "hot", Qty: 4}
	if err := s.GrantOnly(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.Reconcile(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
	gateIs(t, s, "hot", 6)
	if it, _ := s.Item(ctx, "hot"); it.Available != 10 {
		t.Fatalf("item %+v: the database took the grant before Reconcile", it)
	}
	s.Abandon(0)
	if err := s.Reconcile(ctx, "hot"); err != nil {
		t.Fatal(err)
	}
	it, err := s.Item(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	balanced(t, it)
	if it.Reserved != 4 {
		t.Errorf("item %+v: the abandoned grant is not reserved", it)
	}
	gateIs(t, s, "hot", 6)
	res, err := s.ReserveRequest(ctx, r)
	if err != nil || res.State != inventory.Reserved || res.Qty != 4 {
		t.Errorf("the buyer's retry: %+v, %v", res, err)
	}
	gateIs(t, s, "hot", 6)
}

// TestRedisDown: with Redis gone the database decides alone, exactly.
func TestRedisDown(t *testing.T) {
	s, _, srv := redisStore(t, "pgx")
	ctx := ctxT(t)
	if err := s.AddItem(ctx, "hot", 20, 0); err != nil {
		t.Fatal(err)
	}
	redis.SetLogger(quiet{}) // the pool's dial errors, one a request
	defer redis.SetLogger(loud{log.New(os.Stderr, "redis: ", log.LstdFlags|log.Lshortfile)})
	srv.Stop()
	start := time.Now()
	if got := buy(t, s, "hot", 1, 41); got != 20 {
		t.Errorf("%d reserved with Redis down; want 20", got)
	}
	it, err := s.Item(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	balanced(t, it)
	if it.Reserved != 20 {
		t.Errorf("item %+v", it)
	}
	t.Logf("40 requests with Redis down: %v", time.Since(start))
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

type loud struct{ *log.Logger }

func (l loud) Printf(_ context.Context, format string, v ...any) { l.Logger.Printf(format, v...) }

// TestRedisSweeperRepairs: a count left low (units went back to the
// database and Redis was not told) is repaired by the fleet's sweeper
// within an interval.
func TestRedisSweeperRepairs(t *testing.T) {
	s, db, srv := redisStore(t, "pgx")
	ctx := ctxT(t)
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := s.AddItem(ctx, "hot", 10, 0); err != nil {
		t.Fatal(err)
	}
	if got := buy(t, s, "hot", 1, 4); got != 3 {
		t.Fatalf("%d reserved, want 3", got)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	if err := c.Set(ctx, "inventory:{hot}:stock", 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	l, err := tablelock.New(db, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	r, err := schedlock.New(l)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	swept := make(chan error, 1)
	go func() { swept <- s.RunSweeper(sctx, r, 200*time.Millisecond, func(err error) { t.Error(err) }) }()
	dlocktest.Eventually(t, func() bool {
		n, ok, err := s.Gate(ctx, "hot")
		return err == nil && ok && n == 7
	}, "the count repaired to the 7 units left")
	stop()
	if err := <-swept; !errors.Is(err, context.Canceled) {
		t.Errorf("RunSweeper = %v", err)
	}
}

// TestRedisRebuildHonoursCtx: a Reserve that finds the count lost while
// another rebuild of it is stuck leaves when its ctx ends, and nothing is
// reserved.
func TestRedisRebuildHonoursCtx(t *testing.T) {
	s, _, _ := redisStore(t, "pgx")
	ctx := ctxT(t)
	if err := s.AddItem(ctx, "hot", 10, 0); err != nil {
		t.Fatal(err)
	}
	release := s.HoldRebuild()
	defer release()
	soon, cancelled := testenv.CancelSoon()
	_, err := s.Reserve(soon, "r1", 1, "hot", 1)
	testenv.CheckWithinMargin(t, "Reserve waiting for a stuck rebuild", time.Now(), cancelled)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Reserve = %v, want context.Canceled", err)
	}
	if it, err := s.Item(ctx, "hot"); err != nil || it.Available != 10 {
		t.Errorf("item %+v, %v: want the 10 units untouched", it, err)
	}
}
