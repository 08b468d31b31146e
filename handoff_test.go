package dlock_test

import (
	"cmp"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/driver"
)

// handing is memory that can hand a hold on in one call
// (driver.Transferer), and counts what it was asked to do.
type handing struct {
	*memory
	mu        sync.Mutex
	transfers int           // holds handed on
	grants    int           // holds granted by Acquire
	log       []byte        // 'A' for each grant by Acquire, 'T' for each hand-off
	refuse    bool          // Transfer changes nothing
	broken    error         // Transfer fails with it, after handing on
	gate      chan struct{} // when not nil, Transfer waits for it to close
	entered   chan struct{} // when not nil, receives as Transfer starts
	term      time.Duration // when not zero, Transfer grants for it (driver.Grant.Term)
}

func newHanding() *handing { return &handing{memory: newMemory()} }

func (m *handing) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := m.memory.Acquire(ctx, r)
	if g.Acquired {
		m.mu.Lock()
		m.grants++
		m.log = append(m.log, 'A')
		m.mu.Unlock()
	}
	return g, err
}

func (m *handing) Transfer(_ context.Context, h driver.Hold, r driver.Request) (driver.Grant, error) {
	m.mu.Lock()
	gate, refuse, broken, entered, term := m.gate, m.refuse, m.broken, m.entered, m.term
	m.mu.Unlock()
	if entered != nil {
		entered <- struct{}{}
	}
	if gate != nil {
		<-gate
	}
	m.wait()
	if refuse {
		return driver.Grant{}, nil
	}
	m.memory.mu.Lock()
	l, err := m.held(h)
	if err == nil && l.reentry != 1 {
		err = dlock.ErrNotHeld
	}
	if err != nil {
		m.memory.mu.Unlock()
		if errors.Is(err, dlock.ErrNotHeld) {
			return driver.Grant{}, nil
		}
		return driver.Grant{}, err
	}
	m.tokens[h.Name]++
	token := m.tokens[h.Name]
	l.owner, l.payload, l.token, l.expires = r.Owner, r.Payload, token, time.Now().Add(cmp.Or(term, r.TTL))
	m.memory.mu.Unlock()
	m.mu.Lock()
	m.transfers++
	m.log = append(m.log, 'T')
	m.mu.Unlock()
	if broken != nil {
		return driver.Grant{}, broken // handed on, but the reply was lost
	}
	return driver.Grant{Acquired: true, Token: token, Term: term}, nil
}

func (m *handing) counts() (transfers, grants int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.transfers, m.grants
}

var _ driver.Transferer = (*handing)(nil)

// The conformance suite over a backend that hands holds on.
func TestConformanceHandingOn(t *testing.T) {
	m := newHanding()
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { return newClient(t, m, opts...) },
	})
}

// queueUp starts n goroutines that each Lock name through c, in order,
// record their turn and token, and Unlock; it returns once all of them
// wait in c's queue, and a function that waits for them and returns the
// turns and tokens in the order the locks were granted.
func queueUp(t *testing.T, c *dlock.Client, name string, n int) func() (turns []int, tokens []uint64) {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var turns []int
	var tokens []uint64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease, err := c.Lock(ctx, name)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			turns = append(turns, i)
			tokens = append(tokens, lease.Token())
			mu.Unlock()
			if err := lease.Unlock(ctx); err != nil {
				t.Error(err)
			}
		}()
		dlocktest.Eventually(t, func() bool { return dlock.LocalWaiting(c, name) == i+1 }, "waiter queued")
	}
	return func() ([]int, []uint64) {
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(dlocktest.Timeout):
			t.Fatal("the waiters did not all get the name")
		}
		mu.Lock()
		defer mu.Unlock()
		return turns, tokens
	}
}

// A hold that ends while chains of its Locker wait is handed straight to
// the first of them, first come first served, each with a larger token.
func TestHandOffPassesTheLockOn(t *testing.T) {
	m := newHanding()
	c := newClient(t, m)
	name := dlocktest.Name(t)
	first := lockNow(t, c, name)
	const waiters = 5
	wait := queueUp(t, c, name, waiters)
	if err := first.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	turns, tokens := wait()
	last := first.Token()
	for i, turn := range turns {
		if turn != i {
			t.Fatalf("turns %v: not first come, first served", turns)
		}
		if tokens[i] <= last {
			t.Fatalf("tokens %v after %d: not increasing", tokens, first.Token())
		}
		last = tokens[i]
	}
	if transfers, grants := m.counts(); transfers != waiters || grants != 1 {
		t.Fatalf("%d hand-offs and %d acquires for %d waiters behind one holder; want %d and 1", transfers, grants, waiters, waiters)
	}
	if _, held, _ := m.Inspect(context.Background(), name); held {
		t.Fatal("the lock is still held after the last Unlock")
	}
}

// After Config.HandOffs hand-offs in a row the lock goes back through the
// server, and WithHandOffs(0) never hands on.
func TestHandOffsAreBounded(t *testing.T) {
	for _, limit := range []int{0, 2} {
		m := newHanding()
		c := newClient(t, m, dlock.WithHandOffs(limit))
		name := dlocktest.Name(t)
		first := lockNow(t, c, name)
		const waiters = 6
		wait := queueUp(t, c, name, waiters)
		if err := first.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
		wait()
		// limit 2: handed, handed, released; and again.
		wantTransfers := waiters / (limit + 1) * limit
		transfers, grants := m.counts()
		if transfers != wantTransfers || grants != 1+waiters-wantTransfers {
			t.Fatalf("WithHandOffs(%d): %d hand-offs and %d acquires for %d waiters; want %d and %d",
				limit, transfers, grants, waiters, wantTransfers, 1+waiters-wantTransfers)
		}
	}
}

// The bound holds when the lock passes back and forth between two chains,
// whose queue empties at every hand-off: with WithHandOffs(2), every third
// hold is taken on the server.
func TestHandOffsAreBoundedBetweenTwoChains(t *testing.T) {
	m := newHanding()
	c := newClient(t, m, dlock.WithHandOffs(2))
	name := dlocktest.Name(t)
	ctx := context.Background()
	const rounds = 6
	errs := make(chan error, 2)
	var finished atomic.Bool
	for range 2 {
		go func() {
			defer finished.Store(true)
			for range rounds {
				lease, err := c.Lock(ctx, name)
				if err != nil {
					errs <- err
					return
				}
				// Unlock only once the other chain waits (until it has
				// finished): each Unlock can hand on.
				for dlock.LocalWaiting(c, name) == 0 && !finished.Load() {
					time.Sleep(time.Millisecond)
				}
				if err := lease.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(dlocktest.Timeout):
			t.Fatal("the chains did not finish")
		}
	}
	m.mu.Lock()
	log := string(m.log)
	m.mu.Unlock()
	if !strings.HasPrefix(log, "ATTATTATTA") {
		t.Fatalf("grants (A) and hand-offs (T): %s, want ATTATTATTA…: at most 2 hand-offs in a row", log)
	}
}

// A hand-off the server refuses (the hold re-entered there by a sibling,
// or gone) falls back to a release, and the next chain takes the name on
// the server.
func TestHandOffRefused(t *testing.T) {
	m := newHanding()
	m.refuse = true
	c := newClient(t, m, dlock.WithTTL(time.Hour)) // a hold left behind would block the waiters
	name := dlocktest.Name(t)
	first := lockNow(t, c, name)
	wait := queueUp(t, c, name, 2)
	if err := first.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h, held, _ := m.Inspect(context.Background(), name); held && h.Owner == first.Owner() {
		t.Fatal("Unlock returned with the hold still on the server")
	}
	wait()
	if _, grants := m.counts(); grants != 3 {
		t.Fatalf("%d acquires, want 3: a refused hand-off must release and let the next acquire", grants)
	}
	if _, held, _ := m.Inspect(context.Background(), name); held {
		t.Fatal("the lock is still held after the last Unlock")
	}
}

// A hand-off whose outcome is unknown gives back both holds; the chain in
// line still gets the name, and nothing stays held.
func TestHandOffFailed(t *testing.T) {
	m := newHanding()
	m.broken = errUnreachable
	// A hold left behind would block the waiter for the TTL.
	c := newClient(t, m, dlock.WithTTL(time.Hour), dlock.WithBackoff(dlock.ExponentialBackoff(time.Millisecond, 5*time.Millisecond)))
	name := dlocktest.Name(t)
	first := lockNow(t, c, name)
	wait := queueUp(t, c, name, 1)
	if err := first.Unlock(context.Background()); !errors.Is(err, errUnreachable) {
		t.Fatalf("Unlock after a failed hand-off = %v, want the failure", err)
	}
	wait()
	if _, grants := m.counts(); grants != 2 {
		t.Fatalf("%d acquires, want 2: the waiter takes the name on the server", grants)
	}
	dlocktest.Eventually(t, func() bool {
		_, held, _ := m.Inspect(context.Background(), name)
		return !held
	}, "the lock free after the last Unlock")
}

// A lock handed to a chain that left while the hand-off was in flight is
// given back, not kept by nobody.
func TestHandOffToALeftWaiter(t *testing.T) {
	m := newHanding()
	m.gate, m.entered = make(chan struct{}), make(chan struct{}, 1)
	c := newClient(t, m, dlock.WithTTL(time.Hour))
	name := dlocktest.Name(t)
	first := lockNow(t, c, name)
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, name)
		left <- err
	}()
	dlocktest.Eventually(t, func() bool { return dlock.LocalWaiting(c, name) == 1 }, "waiter queued")
	unlocked := make(chan error, 1)
	go func() { unlocked <- first.Unlock(context.Background()) }()
	<-m.entered // the hand-off is in flight
	cancel()
	if err := <-left; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("the abandoned Lock = %v, want ErrNotAcquired", err)
	}
	close(m.gate)
	if err := <-unlocked; err != nil {
		t.Fatal(err)
	}
	dlocktest.Eventually(t, func() bool {
		_, held, _ := m.Inspect(context.Background(), name)
		return !held && !dlock.LocallyHeld(c, name)
	}, "the lock handed to a waiter that had left given back")
	// And the name is free in the process too.
	if err := lockNow(t, c, name).Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func lockNow(t *testing.T, c *dlock.Client, name string) dlock.Lease {
	t.Helper()
	lease, err := c.TryLock(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// A hand-off granted for less than the TTL (driver.Grant.Term) counts
// its lease from the request for that term, and the watchdog renews
// within it. With no watchdog, it is renewed once before the next holder
// gets it, and runs for the TTL.
func TestHandOffForAShorterTerm(t *testing.T) {
	const ttl, term = 30 * time.Second, 3 * time.Second
	for _, tc := range []struct {
		name     string
		opts     []dlock.Option
		renewals int
	}{
		{"watchdog", nil, 0},
		{"no watchdog", []dlock.Option{dlock.WithoutAutoRenew()}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			m := newHanding()
			m.term = term
			c := newClient(t, m, append(tc.opts, dlock.WithTTL(ttl))...)
			first, err := c.Lock(ctx, "x")
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan dlock.Lease, 1)
			go func() {
				lease, err := c.Lock(ctx, "x")
				if err != nil {
					t.Error(err)
				}
				got <- lease
			}()
			dlocktest.Eventually(t, func() bool { return dlock.LocalWaiting(c, "x") == 1 }, "waiter queued")
			before := time.Now()
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			next := <-got
			if next == nil {
				t.Fatal("the waiter did not get the lock")
			}
			defer next.Unlock(ctx)
			after := time.Now()
			if transfers, _ := m.counts(); transfers != 1 {
				t.Fatalf("%d hand-offs, want 1", transfers)
			}
			m.memory.mu.Lock()
			renewed := m.refreshN
			m.memory.mu.Unlock()
			if renewed != tc.renewals {
				t.Errorf("%d renewals before the next holder got the lock, want %d", renewed, tc.renewals)
			}
			d := next.Deadline()
			if tc.renewals == 0 && d.After(before.Add(term)) {
				t.Errorf("deadline %v after the hand-off, past its term %v", d.Sub(before), term)
			}
			if tc.renewals == 1 && d.Before(after.Add(ttl/2)) {
				t.Errorf("deadline %v after the hand-off, want about the TTL %v", d.Sub(after), ttl)
			}
		})
	}
}
