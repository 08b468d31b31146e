package dlocktest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

// RoundTrip is one bare request to the backend's server (PING, SELECT 1,
// exists): the unit benchmark figures are quoted in, so they hold on any
// machine.
type RoundTrip func(ctx context.Context) error

// BenchUncontended is workload W1: one client locks and unlocks a name in a
// loop. Each iteration also times one bare round trip, interleaved, so both
// see the same machine. Metrics: ns/cycle, rtt-ns and rtts/cycle.
func BenchUncontended(b *testing.B, l dlock.Locker, rtt RoundTrip) {
	ctx, cancel := benchContext()
	defer cancel()
	name := Name(b)
	var cycle, trip time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := rtt(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		lease, err := l.Lock(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		cycle += time.Since(t1)
		trip += t1.Sub(t0)
	}
	b.StopTimer()
	b.ReportMetric(float64(cycle.Nanoseconds())/float64(b.N), "ns/cycle")
	b.ReportMetric(float64(trip.Nanoseconds())/float64(b.N), "rtt-ns")
	b.ReportMetric(float64(cycle)/float64(trip), "rtts/cycle")
}

// BenchHold is how long each W2 hold lasts: a busy-wait, exact whatever
// the runtime's timers do (a time.Sleep this short lasts until the next
// timer wake-up, hundreds of µs on a loaded machine).
const BenchHold = 50 * time.Microsecond

// BenchContended is workload W2: each of the lockers (newLocker gives
// each its own connection, as separate processes would have) takes one
// name in turn,
// b.N acquisitions in all; each hold is a read-modify-write of a shared
// counter and a BenchHold busy-wait. Metrics: acq/s, the mean hand-off gap
// (from one holder's Unlock returning to the next holder's Lock
// returning) in ns and in round trips (rtt measured before the run), the
// share of acquisitions that went to the locker that held the lock just
// before (retook-%: with 8 lockers, a lock that hands off in turn is near
// 0, one whose releaser barges back in near 100), lost updates and
// violations, which must both be 0.
//
// It runs once per count of BenchClients, as sub-benchmarks clients=N,
// each with N lockers made by newLocker.
func BenchContended(b *testing.B, newLocker func(b *testing.B) dlock.Locker, rtt RoundTrip) {
	for _, n := range BenchClients {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			lockers := make([]dlock.Locker, n)
			for i := range lockers {
				lockers[i] = newLocker(b)
			}
			benchContended(b, lockers, rtt)
		})
	}
}

// BenchClients are the numbers of contending lockers W2 runs with.
var BenchClients = []int{2, 8, 32}

// benchContended is one W2 run with lockers.
func benchContended(b *testing.B, lockers []dlock.Locker, rtt RoundTrip) {
	ctx, cancel := benchContext()
	defer cancel()
	name := Name(b)
	trip := measureRTT(b, rtt)

	var (
		next        atomic.Int64
		counter     atomic.Int64
		inside      atomic.Int32
		violations  atomic.Int64
		released    atomic.Int64 // ns since base of the last Unlock's return, 0 if none pending
		lastHolder  atomic.Int64 // 1 + index of the locker that held last, 0 before the first
		retook      atomic.Int64
		gapSum      atomic.Int64
		gaps        atomic.Int64
		wg          sync.WaitGroup
		errMu       sync.Mutex
		firstErr    error
		base        = time.Now()
		recordError = func(err error) {
			errMu.Lock()
			if firstErr == nil {
				firstErr = err
			}
			errMu.Unlock()
		}
	)
	b.ResetTimer()
	start := time.Now()
	for i, l := range lockers {
		id := int64(i) + 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				lease, err := l.Lock(ctx, name)
				if err != nil {
					recordError(err)
					return
				}
				now := int64(time.Since(base))
				if r := released.Swap(0); r != 0 {
					gapSum.Add(max(now-r, 0))
					gaps.Add(1)
				}
				if lastHolder.Swap(id) == id {
					retook.Add(1)
				}
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				v := counter.Load()
				for held := time.Now(); time.Since(held) < BenchHold; {
				}
				counter.Store(v + 1)
				inside.Add(-1)
				if err := lease.Unlock(ctx); err != nil {
					recordError(err)
					return
				}
				released.Store(int64(time.Since(base)))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
	lost := int64(b.N) - counter.Load()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acq/s")
	if n := gaps.Load(); n > 0 {
		gap := float64(gapSum.Load()) / float64(n)
		b.ReportMetric(gap, "gap-ns")
		b.ReportMetric(gap/float64(trip), "gap-rtts")
	}
	b.ReportMetric(float64(trip), "rtt-ns")
	b.ReportMetric(100*float64(retook.Load())/float64(b.N), "retook-%")
	b.ReportMetric(float64(lost), "lost-updates")
	b.ReportMetric(float64(violations.Load()), "violations")
	if lost != 0 || violations.Load() != 0 {
		b.Errorf("mutual exclusion failed: %d lost updates, %d violations", lost, violations.Load())
	}
}

// benchContext bounds a benchmark's calls: a lock that never wakes a
// waiter fails the benchmark instead of stalling the run.
func benchContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*Timeout)
}

// measureRTT is the median of a few bare round trips.
func measureRTT(b *testing.B, rtt RoundTrip) time.Duration {
	b.Helper()
	const n = 51
	ds := make([]time.Duration, n)
	for i := range ds {
		t0 := time.Now()
		if err := rtt(context.Background()); err != nil {
			b.Fatal(err)
		}
		ds[i] = time.Since(t0)
	}
	for i := 1; i < n; i++ { // insertion sort: n is tiny
		for j := i; j > 0 && ds[j] < ds[j-1]; j-- {
			ds[j], ds[j-1] = ds[j-1], ds[j]
		}
	}
	return ds[n/2]
}

// Requests reads a server-side counter of requests served (Redis INFO
// commandstats, PostgreSQL pg_stat_database, MySQL Questions, ZooKeeper
// mntr packets), for BenchHerd.
type Requests func(ctx context.Context) (int64, error)

// BenchHerd measures the thundering herd: len(lockers) waiters queue on
// one name, then each hand-off is counted in server requests, reported as
// requests/hand-off. A herd-free lock stays near 2-3 whatever the number
// of waiters; one that wakes every waiter grows with them. The queue is
// then formed again and each waiter holds the lock for HerdHold before it
// unlocks, reported as held-requests/hand-off: waiters that poll, where
// others are woken, make more requests the longer a hold lasts. b.N is
// not used: the figures are per hand-off of one queue.
func BenchHerd(b *testing.B, holder dlock.Locker, lockers []dlock.Locker, requests Requests) {
	ctx, cancel := benchContext()
	defer cancel()
	name := Name(b)
	var quick, held float64
	for i := 0; i < b.N; i++ {
		quick += HerdRound(ctx, b, name, holder, lockers, requests, 0)
		held += HerdRound(ctx, b, name, holder, lockers, requests, HerdHold)
	}
	b.ReportMetric(quick/float64(b.N), "requests/hand-off")
	b.ReportMetric(held/float64(b.N), "held-requests/hand-off")
}

// HerdHold is how long each waiter of BenchHerd's second round holds the
// lock.
const HerdHold = 10 * time.Millisecond

// HerdRound is one round of BenchHerd, for a test as well: it queues
// lockers behind holder on name, lets the server go quiet, and returns
// the server requests per hand-off from holder's Unlock until every
// waiter has held the lock for hold and unlocked.
func HerdRound(ctx context.Context, b testing.TB, name string, holder dlock.Locker, lockers []dlock.Locker, requests Requests, hold time.Duration) float64 {
	first, err := holder.Lock(ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	// Counted before the waiters start: one that has a session at hand
	// sends its request at once, and the wait below is for a request
	// per waiter.
	start, err := requests(ctx)
	if err != nil {
		b.Fatal(err)
	}
	leases := make(chan dlock.Lease, len(lockers))
	errs := make(chan error, len(lockers))
	for _, l := range lockers {
		go func() {
			lease, err := l.Lock(ctx, name)
			if err != nil {
				errs <- err
				return
			}
			leases <- lease
		}()
	}
	// Let every waiter queue and settle: the server has seen at least a
	// request per waiter (one still connecting has sent nothing yet),
	// then goes quiet.
	before := start
	for range 100 {
		time.Sleep(100 * time.Millisecond)
		now, err := requests(ctx)
		if err != nil {
			b.Fatal(err)
		}
		quiet := now-before <= 2 && now-start >= int64(len(lockers))
		before = now
		if quiet {
			break
		}
	}
	if err := first.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
	for range lockers {
		select {
		case lease := <-leases:
			time.Sleep(hold)
			if err := lease.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		case err := <-errs:
			b.Fatal(err)
		}
	}
	after, err := requests(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return float64(after-before) / float64(len(lockers))
}
