package testenv

import (
	"context"
	"database/sql"
	"hash/fnv"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/seckill"
)

// W3's sale: SeckillUsers users, SeckillBuyers at a time, each try to buy
// one of SeckillStock units once.
const (
	SeckillBuyers = 100
	SeckillStock  = 200
	SeckillUsers  = 400
)

// BenchSeckill is workload W3, a flash sale through l: each purchase
// holds l's lock on the item while it reads the stock, then decrements it
// (fenced by the lease's token) and inserts the order (seckill.Locked).
// It lives here, not in dlocktest, so that a third-party backend's tests
// do not pull in every backend and driver.
// Stock and orders are in db, a PostgreSQL or MySQL database; the seckill
// tables are created if missing. The 100 buyers share l, as one process's
// request goroutines would. Each iteration is one sale; every unit must
// be sold exactly once. Metrics: orders/s over the whole sale (every
// user served, sold out or not), and the p50 and p99 latency of a
// purchase attempt, in ms.
func BenchSeckill(b *testing.B, l dlock.Locker, db *sql.DB) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*dlocktest.Timeout)
	defer cancel()
	if err := seckill.Migrate(ctx, db); err != nil {
		b.Fatal(err)
	}
	s, err := seckill.Locked(db, "w3", l)
	if err != nil {
		b.Fatal(err)
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(b.Name()))
	goods := int64(h.Sum32()&0x3fffffff) + 1
	users := seckill.Users(1, SeckillUsers)
	var elapsed time.Duration
	var p50, p99 float64
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if err := seckill.Reset(ctx, db, s, goods, SeckillStock); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res := seckill.Sell(ctx, s, goods, users, SeckillBuyers, nil)
		b.StopTimer()
		if res.Failures > 0 {
			b.Fatalf("%d purchases failed, first: %v", res.Failures, res.FirstError)
		}
		t, err := seckill.Count(ctx, db, s, goods)
		if err != nil {
			b.Fatal(err)
		}
		if res.Orders != SeckillStock || t.Orders != SeckillStock || t.StockLeft != 0 || t.Duplicates != 0 {
			b.Fatalf("sale of %d units: %d orders placed, %d recorded, %d left in stock, %d users with two orders",
				SeckillStock, res.Orders, t.Orders, t.StockLeft, t.Duplicates)
		}
		elapsed += res.Elapsed
		p50 += ms(res.Percentile(50))
		p99 += ms(res.Percentile(99))
	}
	n := float64(b.N)
	b.ReportMetric(n*SeckillStock/elapsed.Seconds(), "orders/s")
	b.ReportMetric(p50/n, "p50-ms")
	b.ReportMetric(p99/n, "p99-ms")
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
