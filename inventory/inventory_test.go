package inventory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/inventory"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/schedlock"
	"github.com/dlockhq/dlock/tablelock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var drivers = append([]string{"pgx", "mysql"}, testenv.PGDrivers...)

var strategies = []inventory.Strategy{inventory.Atomic, inventory.Combining, inventory.Redis, inventory.Buckets}

// database opens a fresh schema with the inventory's tables, on a pool
// of at most 16 connections (the tests' servers are shared).
func database(t *testing.T, driver string) *sql.DB {
	t.Helper()
	db := testenv.Open(t, driver, testenv.FreshDSN(t, driver))
	db.SetMaxOpenConns(16)
	if err := inventory.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// store is the inventory in db, with a Redis for the redis strategy
// under a prefix of the test's own.
func store(t *testing.T, db *sql.DB, opts ...inventory.Option) *inventory.Store {
	t.Helper()
	s, err := inventory.New(db, append([]inventory.Option{inventory.WithRedis(redisClient(t), prefix(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// redisClient is a client of the test Redis, closed with t.
func redisClient(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { c.Close() })
	return c
}

var prefixes atomic.Int64

// prefix is a Redis key prefix no other test uses.
func prefix(t *testing.T) string {
	return fmt.Sprintf("inventory-test:%d:%d:", time.Now().UnixNano(), prefixes.Add(1))
}

// each runs test on every driver and strategy.
func each(t *testing.T, test func(t *testing.T, db *sql.DB, st inventory.Strategy)) {
	for _, driver := range drivers {
		for _, st := range strategies {
			t.Run(driver+"/"+st.String(), func(t *testing.T) {
				test(t, database(t, driver), st)
			})
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*dlocktest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// balanced fails t unless the item's units add up and none is negative.
func balanced(t *testing.T, it inventory.Item) {
	t.Helper()
	if it.Available+it.Reserved+it.Sold != it.Initial || it.Available < 0 || it.Reserved < 0 || it.Sold < 0 {
		t.Errorf("item %+v: available + reserved + sold != initial, or negative", it)
	}
}

// TestContention: 300 buyers of one unit each race for 100 units, 64 at
// a time; a reader watches the item meanwhile. Exactly 100 are reserved,
// 200 told sold out, and every read balances.
func TestContention(t *testing.T) { each(t, contention) }

func contention(t *testing.T, db *sql.DB, st inventory.Strategy) {
	ctx := ctxT(t)
	s := store(t, db, inventory.WithStrategy(st))
	if err := s.AddItem(ctx, "hot", 100, 0); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	reads := watch(t, s, "hot", stop)
	var granted, soldOut atomic.Int64
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	for u := range 300 {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := s.Reserve(ctx, fmt.Sprint("r", u), int64(u+1), "hot", 1)
			switch {
			case err == nil && res.State == inventory.Reserved:
				granted.Add(1)
			case errors.Is(err, inventory.ErrSoldOut) && res.State == inventory.Rejected:
				soldOut.Add(1)
			default:
				t.Errorf("user %d: %+v, %v", u+1, res, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	if n := <-reads; n == 0 {
		t.Error("the reader read nothing")
	}
	if granted.Load() != 100 || soldOut.Load() != 200 {
		t.Errorf("%d reserved, %d sold out; want 100, 200", granted.Load(), soldOut.Load())
	}
	it, err := s.Item(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	if it.Available != 0 || it.Reserved != 100 {
		t.Errorf("item %+v, want 0 available, 100 reserved", it)
	}
	balanced(t, it)
	var rows int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM inventory_reservations WHERE sku = 'hot' AND state = 'reserved'").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 100 {
		t.Errorf("%d reservation rows reserved, want 100", rows)
	}
}

// watch reads the item until stop closes, failing t on a read that does
// not balance; it sends how many reads it made.
func watch(t *testing.T, s *inventory.Store, sku string, stop <-chan struct{}) <-chan int {
	reads := make(chan int, 1)
	go func() {
		n := 0
		defer func() { reads <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			it, err := s.Item(context.Background(), sku)
			if err != nil {
				t.Error(err)
				return
			}
			balanced(t, it)
			n++
			time.Sleep(time.Millisecond)
		}
	}()
	return reads
}

// TestPerUserLimit: 40 users, each sending 5 requests of 1 to 3 units at
// once, for an item limited to 4 units a user. No user ends over 4, the
// units reserved match the item's, and a request is rejected only when
// it would have gone over.
func TestPerUserLimit(t *testing.T) { each(t, perUserLimit) }

func perUserLimit(t *testing.T, db *sql.DB, st inventory.Strategy) {
	ctx := ctxT(t)
	s := store(t, db, inventory.WithStrategy(st))
	if err := s.AddItem(ctx, "limited", 1000, 4); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	held := map[int64]int{}
	var wg sync.WaitGroup
	for u := range 40 {
		for i := range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				qty := 1 + (u+i)%3
				res, err := s.ReserveRequest(ctx, inventory.Request{RequestID: fmt.Sprintf("u%d-%d", u, i), UserID: int64(u + 1), SKU: "limited", Qty: qty})
				switch {
				case err == nil:
					mu.Lock()
					held[res.UserID] += res.Qty
					mu.Unlock()
				case !errors.Is(err, inventory.ErrOverLimit):
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	total := 0
	for u, n := range held {
		if n > 4 {
			t.Errorf("user %d holds %d units, over the limit of 4", u, n)
		}
		if n < 2 {
			t.Errorf("user %d holds %d units: a request that fitted was rejected", u, n)
		}
		total += n
	}
	it, err := s.Item(ctx, "limited")
	if err != nil {
		t.Fatal(err)
	}
	balanced(t, it)
	if it.Reserved != int64(total) {
		t.Errorf("item reserved %d, the users hold %d", it.Reserved, total)
	}
	// A cancel frees the user's room.
	var id int64
	if err := db.QueryRowContext(ctx, "SELECT min(id) FROM inventory_reservations WHERE user_id = 1 AND sku = 'limited' AND state = 'reserved'").Scan(&id); err != nil {
		t.Fatal(err)
	}
	res, err := s.Cancel(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReserveRequest(ctx, inventory.Request{RequestID: "after-cancel", UserID: 1, SKU: "limited", Qty: 4 - held[1] + res.Qty}); err != nil {
		t.Errorf("reserving the cancelled units again: %v", err)
	}
}

// TestIdempotent: a request retried, in sequence or many at once, gets
// its first outcome; a rejection stays a rejection after stock comes
// back; an id reused for another request is refused.
func TestIdempotent(t *testing.T) {
	each(t, func(t *testing.T, db *sql.DB, st inventory.Strategy) {
		ctx := ctxT(t)
		s := store(t, db, inventory.WithStrategy(st))
		if err := s.AddItem(ctx, "one", 1, 0); err != nil {
			t.Fatal(err)
		}
		req := inventory.Request{RequestID: "req-1", UserID: 7, SKU: "one", Qty: 1}
		ids := make(chan int64, 10)
		var wg sync.WaitGroup
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := s.ReserveRequest(ctx, req)
				if err != nil {
					t.Error(err)
				}
				ids <- res.ID
			}()
		}
		wg.Wait()
		close(ids)
		first := int64(0)
		for id := range ids {
			if first == 0 {
				first = id
			}
			if id != first || id == 0 {
				t.Errorf("copies of one request got reservations %d and %d", first, id)
			}
		}
		again, err := s.ReserveRequest(ctx, req)
		if err != nil || again.ID != first {
			t.Errorf("retry = %+v, %v; want reservation %d", again, err, first)
		}
		late := inventory.Request{RequestID: "req-2", UserID: 8, SKU: "one", Qty: 1}
		if _, err := s.ReserveRequest(ctx, late); !errors.Is(err, inventory.ErrSoldOut) {
			t.Fatalf("second buyer of one unit: %v, want ErrSoldOut", err)
		}
		if _, err := s.Cancel(ctx, first); err != nil {
			t.Fatal(err)
		}
		if res, err := s.ReserveRequest(ctx, late); !errors.Is(err, inventory.ErrSoldOut) || res.State != inventory.Rejected {
			t.Errorf("retried rejection after the stock came back = %+v, %v; want the first outcome, sold out", res, err)
		}
		if _, err := s.ReserveRequest(ctx, inventory.Request{RequestID: "req-1", UserID: 7, SKU: "one", Qty: 2}); !errors.Is(err, inventory.ErrRequestReused) {
			t.Errorf("request id reused for 2 units: %v, want ErrRequestReused", err)
		}
		it, err := s.Item(ctx, "one")
		if err != nil {
			t.Fatal(err)
		}
		if it.Available != 1 {
			t.Errorf("item %+v: want the cancelled unit available", it)
		}
		balanced(t, it)
	})
}

// TestLifecycle: confirm sells, cancel returns, each twice is the same,
// and the other move is refused.
func TestLifecycle(t *testing.T) {
	each(t, func(t *testing.T, db *sql.DB, st inventory.Strategy) {
		ctx := ctxT(t)
		s := store(t, db, inventory.WithStrategy(st))
		if err := s.AddItem(ctx, "sku-1", 10, 0); err != nil {
			t.Fatal(err)
		}
		a, err := s.ReserveRequest(ctx, inventory.Request{RequestID: "a", UserID: 1, SKU: "sku-1", Qty: 3})
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.ReserveRequest(ctx, inventory.Request{RequestID: "b", UserID: 2, SKU: "sku-1", Qty: 2})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if res, err := s.Confirm(ctx, a.ID); err != nil || res.State != inventory.Confirmed {
				t.Fatalf("confirm = %+v, %v", res, err)
			}
			if res, err := s.Cancel(ctx, b.ID); err != nil || res.State != inventory.Cancelled {
				t.Fatalf("cancel = %+v, %v", res, err)
			}
		}
		if _, err := s.Cancel(ctx, a.ID); !errors.Is(err, inventory.ErrConfirmed) {
			t.Errorf("cancel of a confirmed reservation: %v, want ErrConfirmed", err)
		}
		if _, err := s.Confirm(ctx, b.ID); !errors.Is(err, inventory.ErrCancelled) {
			t.Errorf("confirm of a cancelled reservation: %v, want ErrCancelled", err)
		}
		if _, err := s.Confirm(ctx, 1<<40); !errors.Is(err, inventory.ErrNotFound) {
			t.Errorf("confirm of no reservation: %v, want ErrNotFound", err)
		}
		it, err := s.Item(ctx, "sku-1")
		if err != nil {
			t.Fatal(err)
		}
		want := inventory.Item{SKU: "sku-1", Initial: 10, Available: 7, Sold: 3}
		if st == inventory.Buckets {
			want.Buckets = 16 // the default
		}
		if it != want {
			t.Errorf("item %+v, want 7 available, 3 sold", it)
		}
	})
}

// TestExpiry: reservations not confirmed expire and their units return
// within the TTL plus the sweep interval (plus the Locker's TTL, should a
// sweeping node's release fail), swept by one of three nodes' sweepers on
// the lock table; a confirm too late is refused.
func TestExpiry(t *testing.T) {
	const ttl, interval, lockTTL = 500 * time.Millisecond, 300 * time.Millisecond, time.Second
	for _, driver := range drivers {
		for _, st := range []inventory.Strategy{inventory.Combining, inventory.Redis, inventory.Buckets} {
			t.Run(driver+"/"+st.String(), func(t *testing.T) { expiry(t, driver, st, ttl, interval, lockTTL) })
		}
	}
}

// expiry is TestExpiry on one driver and strategy.
func expiry(t *testing.T, driver string, st inventory.Strategy, ttl, interval, lockTTL time.Duration) {
	db := database(t, driver)
	if err := migrations.Up(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	s := store(t, db, inventory.WithReservationTTL(ttl), inventory.WithStrategy(st))
	if err := s.AddItem(ctx, "exp", 50, 5); err != nil {
		t.Fatal(err)
	}
	late, err := s.ReserveRequest(ctx, inventory.Request{RequestID: "late", UserID: 1, SKU: "exp", Qty: 5})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl + 50*time.Millisecond)
	if _, err := s.Confirm(ctx, late.ID); !errors.Is(err, inventory.ErrExpired) {
		t.Fatalf("confirm after the TTL: %v, want ErrExpired", err)
	}
	swept := make(chan error, 3)
	sctx, stop := context.WithCancel(ctx)
	for range 3 {
		l, err := tablelock.New(db, dlock.WithTTL(lockTTL))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(context.Background()) })
		r, err := schedlock.New(l)
		if err != nil {
			t.Fatal(err)
		}
		go func() { swept <- s.RunSweeper(sctx, r, interval, func(err error) { t.Error(err) }) }()
	}
	reserved := time.Now()
	for u := range 10 {
		if _, err := s.ReserveRequest(ctx, inventory.Request{RequestID: fmt.Sprint("e", u), UserID: int64(u + 1), SKU: "exp", Qty: 5}); err != nil {
			t.Fatal(err)
		}
	}
	dlocktest.Eventually(t, func() bool {
		it, err := s.Item(ctx, "exp")
		if err != nil {
			t.Fatal(err)
		}
		balanced(t, it)
		return it.Available == 50
	}, "the expired units back")
	// The promise is TTL + interval (+ the Locker's TTL); the
	// slack is the machine's.
	if took := time.Since(reserved); took > ttl+interval+lockTTL+2*time.Second {
		t.Errorf("the units came back %v after the reservations, more than TTL %v + interval %v + the Locker's TTL %v", took, ttl, interval, lockTTL)
	}
	stop()
	for range 3 {
		if err := <-swept; !errors.Is(err, context.Canceled) {
			t.Errorf("RunSweeper = %v, want context.Canceled", err)
		}
	}
	var expired int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM inventory_reservations WHERE state = 'expired'").Scan(&expired); err != nil {
		t.Fatal(err)
	}
	if expired != 11 {
		t.Errorf("%d reservations expired, want 11", expired)
	}
	// The users' room came back with the units.
	if _, err := s.ReserveRequest(ctx, inventory.Request{RequestID: "again", UserID: 1, SKU: "exp", Qty: 5}); err != nil {
		t.Errorf("user 1 reserving its limit again: %v", err)
	}
	if st == inventory.Redis { // the gate got the expired units back too
		gateIs(t, s, "exp", 45)
	}
}

// TestBadInput: each bad request fails with one line before any I/O (the
// database is closed), and nothing changes.
func TestBadInput(t *testing.T) {
	db := database(t, "pgx")
	ctx := ctxT(t)
	s := store(t, db)
	if err := s.AddItem(ctx, "ok", 5, 0); err != nil {
		t.Fatal(err)
	}
	db.Close()
	good := inventory.Request{RequestID: "r", UserID: 1, SKU: "ok", Qty: 1}
	for name, r := range map[string]inventory.Request{
		"no request id":      {UserID: 1, SKU: "ok", Qty: 1},
		"long request id":    {RequestID: strings.Repeat("x", inventory.MaxIDLen+1), UserID: 1, SKU: "ok", Qty: 1},
		"request id spaces":  {RequestID: "a b", UserID: 1, SKU: "ok", Qty: 1},
		"request id invalid": {RequestID: "a\xff", UserID: 1, SKU: "ok", Qty: 1},
		"no sku":             {RequestID: "r", UserID: 1, Qty: 1},
		"user 0":             {RequestID: "r", SKU: "ok", Qty: 1},
		"qty 0":              {RequestID: "r", UserID: 1, SKU: "ok"},
		"qty negative":       {RequestID: "r", UserID: 1, SKU: "ok", Qty: -1},
		"qty huge":           {RequestID: "r", UserID: 1, SKU: "ok", Qty: inventory.MaxQty + 1},
	} {
		_, err := s.Reserve(ctx, r.RequestID, r.UserID, r.SKU, r.Qty)
		if err == nil || strings.Contains(err.Error(), "closed") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line before any I/O", name, err)
		}
		if err := r.Validate(); err == nil {
			t.Errorf("%s: Validate passed", name)
		}
	}
	if err := good.Validate(); err != nil {
		t.Errorf("a good request: %v", err)
	}
	if _, err := inventory.New(nil); err == nil {
		t.Error("New(nil) passed")
	}
	for i, o := range []inventory.Option{inventory.WithReservationTTL(0), inventory.WithMaxBatch(0), inventory.WithMaxBatch(inventory.MaxBatch + 1), inventory.WithStrategy(9),
		inventory.WithStrategy(inventory.Redis), inventory.WithRedis(nil, ""), inventory.WithRedis(redisClient(t), "a{b}:"), inventory.WithBuckets(0), inventory.WithBuckets(inventory.MaxBuckets + 1)} {
		if _, err := inventory.New(db, o); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("New with bad option %d: %v, want one line", i, err)
		}
	}
	if err := s.Reconcile(ctx, ""); err == nil || strings.Contains(err.Error(), "closed") {
		t.Errorf("Reconcile of no sku = %v, want a refusal before I/O", err)
	}
	if _, err := s.Sweep(ctx, 0); err == nil {
		t.Error("Sweep(0) passed")
	}
	if _, err := s.Confirm(ctx, 0); err == nil || strings.Contains(err.Error(), "closed") {
		t.Errorf("Confirm(0) = %v, want a refusal before I/O", err)
	}
}
