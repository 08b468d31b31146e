package seckill

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is what a sale's buyers saw.
type Result struct {
	Orders, SoldOut, Duplicates, Failures int
	// FirstError is one of the failures, if any.
	FirstError error
	// Latencies of every PlaceOrder call, sorted.
	Latencies []time.Duration
	Elapsed   time.Duration
}

// Percentile returns the p-th percentile (0–100) of the latencies.
func (r Result) Percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.Latencies)-1) * p / 100)
	return r.Latencies[i]
}

// Sell runs a sale: users (given by id) each try to buy goodsID once, at
// most buyers at a time (one when buyers < 1). progress, if not nil, is called after each
// attempt with the number done. ctx governs the sale.
func Sell(ctx context.Context, s Strategy, goodsID int64, users []int64, buyers int, progress func(done int)) Result {
	var (
		mu    sync.Mutex
		res   Result
		done  atomic.Int64
		next  atomic.Int64
		wg    sync.WaitGroup
		start = time.Now()
	)
	res.Latencies = make([]time.Duration, 0, len(users))
	for range max(buyers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if int(i) >= len(users) || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				_, err := s.PlaceOrder(ctx, users[i], goodsID)
				lat := time.Since(t0)
				mu.Lock()
				res.Latencies = append(res.Latencies, lat)
				switch {
				case err == nil:
					res.Orders++
				case errors.Is(err, ErrSoldOut):
					res.SoldOut++
				case errors.Is(err, ErrDuplicateOrder):
					res.Duplicates++
				default:
					res.Failures++
					if res.FirstError == nil {
						res.FirstError = err
					}
				}
				mu.Unlock()
				if progress != nil {
					progress(int(done.Add(1)))
				}
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	slices.Sort(res.Latencies)
	return res
}

// Users returns n user ids starting at first; none when n < 1.
func Users(first int64, n int) []int64 {
	u := make([]int64, max(n, 0))
	for i := range u {
		u[i] = first + int64(i)
	}
	return u
}
