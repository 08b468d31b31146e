package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
)

// Counted is a database whose statements are counted where they leave
// the client, opened through a PGCounter or a MySQLCounter.
type Counted struct {
	Name  string
	Open  func(testing.TB) *sql.DB
	Count dlocktest.Requests
}

// CountedDatabases are the SQL test databases, each with a counter of its
// own.
func CountedDatabases() []Counted {
	var pg PGCounter
	var my MySQLCounter
	return []Counted{
		{"postgres", pg.Open, pg.Requests()},
		{"mysql", my.Open, my.Requests()},
	}
}

// StatementsPerHold runs 8 call chains that take a name (name/suffix)
// through l 10 times each, checks that every hold's token is larger than
// the one before, and returns the statements count saw per hold: how
// much a hold costs when the chains of one Locker hand the lock to each
// other.
func StatementsPerHold(t *testing.T, l dlock.Locker, count dlocktest.Requests, suffix string) float64 {
	t.Helper()
	const chains, rounds = 8, 10
	ctx := context.Background()
	name := dlocktest.Name(t) + "/" + suffix
	before, err := count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		last   uint64
		failed bool
		wg     sync.WaitGroup
	)
	for range chains {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				lease, err := l.Lock(ctx, name)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if lease.Token() <= last && !failed {
					failed = true
					t.Errorf("token %d after %d", lease.Token(), last)
				}
				last = lease.Token()
				mu.Unlock()
				if err := lease.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	after, err := count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return float64(after-before) / (chains * rounds)
}

// CheckHandOff checks, on each SQL test database, that call chains
// sharing a Locker made by mk hand the lock on to each other (see
// CheckHandsOn), and that with WithHandOffs(0) a hold costs at least
// without[database name] statements.
func CheckHandOff(t *testing.T, mk func(testing.TB, *sql.DB, ...dlock.Option) dlock.Locker, without map[string]float64) {
	for _, d := range CountedDatabases() {
		t.Run(d.Name, func(t *testing.T) {
			db := Migrated(t, d.Open)
			CheckHandsOn(t, func(opts ...dlock.Option) dlock.Locker { return mk(t, db, opts...) }, d.Count, without[d.Name])
		})
	}
}

// CheckHandsOn checks that call chains sharing a Locker made by mk hand
// the lock on to each other, at most 1.5 requests (counted by count) per
// hold with the default hand-offs, and that with WithHandOffs(0) a hold
// costs at least without requests (an acquire and a release): the count
// can tell them apart.
func CheckHandsOn(t *testing.T, mk func(...dlock.Option) dlock.Locker, count dlocktest.Requests, without float64) {
	t.Helper()
	for _, limit := range []int{dlock.DefaultHandOffs, 0} {
		perHold := StatementsPerHold(t, mk(dlock.WithHandOffs(limit)), count, fmt.Sprint(limit))
		t.Logf("WithHandOffs(%d): %.2f requests per hold", limit, perHold)
		switch {
		case limit > 0 && perHold > 1.5:
			t.Errorf("WithHandOffs(%d): %.2f requests per hold, want at most 1.5: the lock is not handed on", limit, perHold)
		case limit == 0 && perHold < without:
			t.Errorf("WithHandOffs(0): %.2f requests per hold, want at least %.0f", perHold, without)
		}
	}
}

// CheckHandOffAfterWaiting checks, on each SQL test database, that call
// chains sharing a Locker made by mk hand the lock on to each other once
// it comes to them from a Locker of another pool (another process), at
// most 1.5 statements per hold (see HandsOnAfterWaiting).
func CheckHandOffAfterWaiting(t *testing.T, mk func(testing.TB, *sql.DB, ...dlock.Option) dlock.Locker) {
	for _, d := range CountedDatabases() {
		t.Run(d.Name, func(t *testing.T) {
			CheckHandsOnAfterWaiting(t, mk(t, Migrated(t, d.Open)), mk(t, d.Open(t)), d.Count)
		})
	}
}

// CheckHandsOnAfterWaiting checks that the call chains of shared, having
// waited for a name other holds, pass it on to each other once they have
// it, at most 1.5 requests (counted by count) per hold: the attempts
// they made while other held the name do not count as another process
// waiting.
func CheckHandsOnAfterWaiting(t *testing.T, shared, other dlock.Locker, count dlocktest.Requests) {
	t.Helper()
	perHold := HandsOnAfterWaiting(t, shared, other, count)
	t.Logf("%.2f requests per hold after waiting for another process", perHold)
	if perHold > 1.5 {
		t.Errorf("%.2f requests per hold after waiting for another process, want at most 1.5: the lock is not handed on", perHold)
	}
}

// HandsOnAfterWaiting has other hold a name while 16 call chains of
// shared ask for it, waits until they have asked the server, has other
// let go, and returns the requests count saw per hold from then on,
// with each hold's token checked to be larger than the one before.
func HandsOnAfterWaiting(t *testing.T, shared, other dlock.Locker, count dlocktest.Requests) float64 {
	t.Helper()
	const chains = 16
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	first, err := other.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	start, err := count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tokens := make(chan uint64, chains)
	var wg sync.WaitGroup
	for range chains {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := shared.Lock(ctx, name)
			if err != nil {
				t.Error(err)
				return
			}
			tokens <- lease.Token()
			if err := lease.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	dlocktest.Eventually(t, func() bool {
		n, err := count(ctx)
		return err == nil && n > start
	}, "the waiters' first attempt")
	before, err := count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	after, err := count(ctx)
	if err != nil {
		t.Fatal(err)
	}
	close(tokens)
	last := first.Token()
	for token := range tokens { // in the order the holds began
		if token <= last {
			t.Errorf("token %d after %d", token, last)
		}
		last = token
	}
	return float64(after-before) / chains
}

// CheckHandOffLetsAnotherIn checks, on each SQL test database, that a
// Locker made by mk with opts lets a Locker of another pool (another
// process) in (see LetsAnotherIn).
func CheckHandOffLetsAnotherIn(t *testing.T, mk func(testing.TB, *sql.DB, ...dlock.Option) dlock.Locker, opts ...dlock.Option) {
	for _, d := range SQLDatabases {
		t.Run(d.Name, func(t *testing.T) {
			LetsAnotherIn(t, mk(t, Migrated(t, d.Open), opts...), mk(t, d.Open(t)))
		})
	}
}

// LetsAnotherIn checks that busy, whose two goroutines take a name in
// turn as fast as they can, lets other (another process) have the name
// within dlocktest.Timeout.
func LetsAnotherIn(t *testing.T, busy, other dlock.Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	got := make(chan struct{})
	var holds atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-got:
					return
				default:
				}
				lease, err := busy.Lock(ctx, name)
				if err != nil {
					return
				}
				time.Sleep(5 * time.Millisecond) // the work
				if err := lease.Unlock(context.Background()); err != nil {
					t.Error(err)
					return
				}
				holds.Add(1)
			}
		}()
	}
	// The busy process passes the lock around before the other asks.
	dlocktest.Eventually(t, func() bool { return holds.Load() >= 10 }, "the busy process's holds")
	lease, err := other.Lock(ctx, name)
	close(got)
	if err != nil {
		wg.Wait()
		t.Fatalf("another process never got the lock from one whose goroutines hand it on: %v", err)
	}
	if err := lease.Unlock(context.Background()); err != nil {
		t.Error(err)
	}
	wg.Wait()
}

// LockLater starts l.Lock(ctx, name) and returns where its lease comes:
// nil, with the test marked failed, if it fails.
func LockLater(t testing.TB, ctx context.Context, l dlock.Locker, name string) <-chan dlock.Lease {
	got := make(chan dlock.Lease, 1)
	go func() {
		lease, err := l.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	return got
}

// HandOffYields checks that a hold of busy that ends while another
// process (other) is queued on the server does not pass to the next call
// chain of busy: other holds next, then that chain, with increasing
// tokens, and the ending hold's Unlock succeeds. queued reports that
// other's waiter for name is on the server; requests counts busy's requests, of
// which the Unlock must send at least tried (a hand-off attempt and what
// follows it), so the check fails where no hand-off was attempted.
func HandOffYields(t *testing.T, busy, other dlock.Locker, queued func(name string) bool, requests func() int64, tried int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	first, err := busy.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	queuedLease := LockLater(t, ctx, other, name)
	dlocktest.Eventually(t, func() bool { return queued(name) }, "the other process queued on the server")
	next := LockLater(t, ctx, busy, name)
	// next waits in busy's process, not on the server; give it the moment
	// it takes to get there.
	time.Sleep(100 * time.Millisecond)

	before := requests()
	if err := first.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the hold that tried a hand-off: %v", err)
	}
	if n := requests() - before; n < tried {
		t.Fatalf("%d requests at the Unlock, want at least %d: no hand-off was tried", n, tried)
	}
	got := <-queuedLease
	if got == nil {
		t.FailNow()
	}
	select {
	case <-next:
		t.Fatal("the next chain of the releasing process got the lock ahead of the queued process")
	default:
	}
	if got.Token() <= first.Token() {
		t.Errorf("the queued process's token %d after the holder's %d", got.Token(), first.Token())
	}
	if err := got.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	last := <-next
	if last == nil {
		t.FailNow()
	}
	if last.Token() <= got.Token() {
		t.Errorf("the next chain's token %d after the queued process's %d", last.Token(), got.Token())
	}
	if err := last.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
