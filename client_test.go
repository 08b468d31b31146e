package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/driver"
)

func newClient(t testing.TB, m driver.Backend, opts ...dlock.Option) *dlock.Client {
	t.Helper()
	c, err := dlock.NewClient(m, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// The suite's own check: the policy in Client over a correct backend
// passes it.
func TestConformanceInMemory(t *testing.T) {
	m := newMemory()
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			return newClient(t, m, opts...)
		},
		Broken: func(t *testing.T) dlock.Locker {
			closed := newMemory()
			closed.close()
			return newClient(t, closed)
		},
	})
}

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{strings.Repeat("x", dlock.MaxNameLen), true},
		{"锁", true},
		{"", false},
		{"a\x00", false},
		{strings.Repeat("x", dlock.MaxNameLen+1), false},
		{"\xc3", false},
	} {
		err := dlock.ValidateName(tc.name)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, dlock.ErrInvalidName)) {
			t.Errorf("ValidateName(%q) = %v", tc.name, err)
		}
	}
}

func TestBadOptions(t *testing.T) {
	for what, opt := range map[string]dlock.Option{
		"zero TTL":     dlock.WithTTL(0),
		"negative TTL": dlock.WithTTL(-time.Second),
		"NUL owner":    dlock.WithOwner("a\x00b"),
		"long owner":   dlock.WithOwner(strings.Repeat("o", 256)),
		"nil option":   nil,
		"hand-offs -1": dlock.WithHandOffs(-1),
	} {
		if _, err := dlock.NewClient(newMemory(), opt); err == nil {
			t.Errorf("%s: NewClient accepted it", what)
		}
	}
	if _, err := dlock.NewClient(nil); err == nil {
		t.Error("NewClient(nil) accepted a nil backend")
	}
}

// ttlBounded is a backend whose server keeps a lease for an hour at most.
type ttlBounded struct{ *memory }

func (ttlBounded) MaxTTL() time.Duration { return time.Hour }

// A backend's bound on the TTL (driver.TTLBounded) is kept by NewClient,
// before any I/O, and reported by MaxTTL; a backend with none reports
// the longest duration.
func TestMaxTTL(t *testing.T) {
	if _, err := dlock.NewClient(ttlBounded{newMemory()}, dlock.WithTTL(time.Hour+time.Millisecond)); err == nil || !strings.Contains(err.Error(), "MaxTTL") {
		t.Errorf("a TTL over the backend's bound: %v, want an error naming MaxTTL", err)
	}
	if got := newClient(t, ttlBounded{newMemory()}, dlock.WithTTL(time.Hour)).MaxTTL(); got != time.Hour {
		t.Errorf("MaxTTL of a bounded backend's Client = %v, want 1h", got)
	}
	if got := newClient(t, newMemory(), dlock.WithTTL(math.MaxInt64)).MaxTTL(); got != math.MaxInt64 {
		t.Errorf("MaxTTL of an unbounded backend's Client = %v, want the longest duration", got)
	}
}

// memorySetting is a setting key of the memory backend's own package.
type memorySetting struct{}

// NewClient takes a backend's settings only from the backend's own
// package: an option meant for another backend is an error, as is a key
// of no package's own type, which no backend can have meant.
func TestSettings(t *testing.T) {
	c := newClient(t, newMemory(), dlock.WithSetting(memorySetting{}, 3))
	if v, ok := c.Config().Setting(memorySetting{}); !ok || v != 3 {
		t.Errorf("Setting of the backend's own key = %v, %v; want 3, true", v, ok)
	}
	if _, err := dlock.NewClient(newMemory(), dlock.WithSetting(time.Duration(0), 3)); err == nil || !strings.Contains(err.Error(), "option of package time") {
		t.Errorf("another package's key: %v, want an error naming that package", err)
	}
	for what, key := range map[string]any{"a string": "replicas", "a nil": nil} {
		if _, err := dlock.NewClient(newMemory(), dlock.WithSetting(key, 3)); err == nil || !strings.Contains(err.Error(), "WithSetting's key") {
			t.Errorf("%s key: %v, want an error saying the key is of no package's type", what, err)
		}
	}
}

// ExponentialBackoff reads a base of 0 or less as 1ms, and a max below
// base as base.
func TestExponentialBackoffBounds(t *testing.T) {
	for _, tc := range []struct{ base, max, limit time.Duration }{
		{0, 0, time.Millisecond},
		{-time.Second, -time.Second, time.Millisecond},
		{time.Second, time.Millisecond, time.Second},
	} {
		b := dlock.ExponentialBackoff(tc.base, tc.max)
		for attempt := range 70 {
			if d := b(attempt); d <= 0 || d > tc.limit {
				t.Fatalf("ExponentialBackoff(%v, %v)(%d) = %v, outside (0, %v]", tc.base, tc.max, attempt, d, tc.limit)
			}
		}
	}
}

func TestExponentialBackoff(t *testing.T) {
	b := dlock.ExponentialBackoff(time.Millisecond, 100*time.Millisecond)
	for attempt := range 200 {
		limit := 100 * time.Millisecond
		if attempt < 7 {
			limit = time.Millisecond << attempt
		}
		for range 20 {
			if d := b(attempt); d <= 0 || d > limit {
				t.Fatalf("attempt %d: %v outside (0, %v]", attempt, d, limit)
			}
		}
	}
}

// A lease whose renewals fail ends before its TTL runs out on the server:
// the client deadline counts from when the acquire was sent.
func TestRenewalFailureLosesLeaseBeforeServerExpiry(t *testing.T) {
	m := newMemory()
	ttl := 600 * time.Millisecond
	c := newClient(t, m, dlock.WithTTL(ttl))
	lease, err := c.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	m.fail(errUnreachable)
	<-lease.Done()
	if err := lease.Err(); !errors.Is(err, dlock.ErrLost) || !errors.Is(err, errUnreachable) {
		t.Fatalf("Err() = %v, want ErrLost wrapping the renewal error", err)
	}
	m.fail(nil)
	if h, held, _ := m.Inspect(context.Background(), "x"); held && h.TTL <= 0 {
		t.Fatalf("server expiry passed before Done closed: %+v", h)
	}
	if err := lease.Unlock(context.Background()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of a lost lease: %v, want ErrNotHeld", err)
	}
}

// The watchdog renews; a lease outlives several TTLs while held.
func TestWatchdogRenews(t *testing.T) {
	m := newMemory()
	ttl := 300 * time.Millisecond
	c := newClient(t, m, dlock.WithTTL(ttl))
	lease, err := c.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
		t.Fatalf("lease ended while renewed: %v", lease.Err())
	case <-time.After(4 * ttl):
	}
	m.mu.Lock()
	n := m.refreshN
	m.mu.Unlock()
	if n < 3 {
		t.Fatalf("%d renewals in 4 TTLs, want at least 3", n)
	}
	if err := lease.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A renewal that finds the lock taken over ends the lease at once, with
// ErrNotHeld as the cause.
func TestStolenLockEndsLease(t *testing.T) {
	m := newMemory()
	c := newClient(t, m, dlock.WithTTL(300*time.Millisecond))
	lease, err := c.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	m.stolen("x")
	<-lease.Done()
	if err := lease.Err(); !errors.Is(err, dlock.ErrLost) || !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Err() = %v, want ErrLost and ErrNotHeld", err)
	}
}

// Do cancels fn's context when the lease is lost and reports the loss.
func TestDoCancelsWorkOnLoss(t *testing.T) {
	m := newMemory()
	c := newClient(t, m, dlock.WithTTL(300*time.Millisecond))
	err := dlock.Do(context.Background(), c, "x", func(ctx context.Context, _ dlock.Lease) error {
		m.stolen("x")
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), dlock.ErrLost) {
			t.Errorf("work ctx cause = %v, want ErrLost", context.Cause(ctx))
		}
		return nil
	})
	if !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("Do = %v, want ErrLost", err)
	}
}

// fn that returns its ctx's cause (the loss) gets the loss once from Do.
func TestDoSaysTheLossOnce(t *testing.T) {
	m := newMemory()
	c := newClient(t, m, dlock.WithTTL(300*time.Millisecond))
	err := dlock.Do(context.Background(), c, "x", func(ctx context.Context, _ dlock.Lease) error {
		m.stolen("x")
		<-ctx.Done()
		return fmt.Errorf("work stopped: %w", context.Cause(ctx))
	})
	if !errors.Is(err, dlock.ErrLost) || strings.Count(err.Error(), "lease lost") != 1 {
		t.Fatalf("Do = %q, want the loss said once", err)
	}
}

func TestClose(t *testing.T) {
	m := newMemory()
	c := newClient(t, m)
	lease, err := c.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("lease Err after Close = %v, want ErrClosed", err)
	}
	if _, held, _ := m.Inspect(context.Background(), "x"); held {
		t.Fatal("Close left the lock held on the server")
	}
	if _, err := c.TryLock(context.Background(), "x"); !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("TryLock after Close = %v, want ErrClosed", err)
	}
}

// A Lock waiting for another owner returns ErrClosed when its Locker closes.
func TestCloseWakesWaiters(t *testing.T) {
	m := newMemory()
	holder, waiter := newClient(t, m), newClient(t, m)
	if _, err := holder.Lock(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(context.Background(), "x")
		errc <- err
	}()
	m.waitRefused(t) // the waiter is waiting
	waiter.Close(context.Background())
	if err := <-errc; !errors.Is(err, dlock.ErrClosed) {
		t.Fatalf("waiting Lock after Close = %v, want ErrClosed", err)
	}
}

// blocking is a memory backend whose server queues waiters, as a
// ZooKeeper queue or pg_advisory_lock does: AcquireWait returns only when
// the lock is granted, however long that takes.
type blocking struct{ *memory }

func (b blocking) AcquireWait(ctx context.Context, r driver.Request) (driver.Grant, error) {
	for {
		g, err := b.Acquire(ctx, r)
		if err != nil || g.Acquired {
			return g, err
		}
		select {
		case <-ctx.Done():
			return driver.Grant{}, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// A Lock that waited in the server's queue longer than the TTL gets a
// lease that lasts: its deadline counts from a renewal after the grant,
// not from when the wait began.
func TestLongBlockingWaitKeepsLease(t *testing.T) {
	m := blocking{newMemory()}
	ttl := 300 * time.Millisecond
	holder, err := newClient(t, m, dlock.WithTTL(ttl)).Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan dlock.Lease, 1)
	go func() {
		lease, err := newClient(t, m, dlock.WithTTL(ttl)).Lock(context.Background(), "x")
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	time.Sleep(2 * ttl) // the waiter waits past its TTL
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	select {
	case <-lease.Done():
		t.Fatalf("lease ended right after a long wait: %v", lease.Err())
	case <-time.After(ttl):
	}
	if err := lease.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A release that failed is retried in the background; the Locker's next
// Lock of the name is a new hold (a new owner id), which cannot re-enter
// the hold left on the server: it waits for it, gets a new token, and its
// Unlock frees the lock for others.
func TestFailedReleaseIsRetried(t *testing.T) {
	m := newMemory()
	c := newClient(t, m, dlock.WithTTL(time.Minute))
	ctx := context.Background()
	first, err := c.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	m.fail(errUnreachable)
	if err := first.Unlock(ctx); err == nil || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock with the server unreachable: %v", err)
	}
	if _, err := c.TryLock(ctx, "x"); !errors.Is(err, errUnreachable) {
		t.Fatalf("TryLock with the server unreachable: %v", err)
	}
	m.fail(nil)
	lockAfter(t, c, first)
	other, err := newClient(t, m).TryLock(ctx, "x")
	if err != nil {
		t.Fatalf("another owner after the Unlock: %v", err)
	}
	other.Unlock(ctx)
}

// The lease rule with a renewal that hangs (a frozen server, a driver that
// ignores ctx): Done closes at the client's deadline, before the server's
// expiry, not when the hung call returns. The TTL leaves the client a
// margin of 100ms before the server's expiry (see leaseMargin): this
// test's own wake-up after Done closes must fit in it, under a loaded race
// build too.
func TestDoneClosesWhileRenewalHangs(t *testing.T) {
	m := newMemory()
	ttl := time.Second
	c := newClient(t, m, dlock.WithTTL(ttl))
	lease, err := c.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	m.freeze()
	defer m.thaw()
	select {
	case <-lease.Done():
	case <-time.After(10 * ttl):
		t.Fatal("Done stayed open while the renewal hung")
	}
	if now, expiry := time.Now(), m.expiry("x"); !now.Before(expiry) {
		t.Fatalf("Done closed %v after the server-side expiry", now.Sub(expiry))
	}
	if !errors.Is(lease.Err(), dlock.ErrLost) {
		t.Fatalf("Err() = %v, want ErrLost", lease.Err())
	}
}

// Lock returns when its ctx ends even if the backend call hangs, and the
// grant that arrives late is given back.
func TestLockReturnsWhileAcquireHangs(t *testing.T) {
	m := newMemory()
	c := newClient(t, m)
	m.freeze()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := c.Lock(ctx, "x"); !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock on a frozen server: %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
	m.thaw() // the hung attempt now takes the lock; the client gives it back
	lease, err := newClient(t, m).Lock(context.Background(), "x")
	if err != nil {
		t.Fatalf("another owner after the late grant: %v", err)
	}
	lease.Unlock(context.Background())
}

// leaving is a memory backend with a server-side queue to leave
// (driver.Leaver); its Leave hangs with the server, as its other calls do.
type leaving struct{ *memory }

func (b leaving) Leave(context.Context, driver.Request) error {
	b.wait()
	return nil
}

// hangingLeave is a memory backend whose Leave alone hangs, until leave
// is closed; its other calls answer as usual, so a waiter's next attempt
// never hangs with it.
type hangingLeave struct {
	*memory
	leave chan struct{}
}

func (b hangingLeave) Leave(context.Context, driver.Request) error {
	<-b.leave
	return nil
}

// A Lock cancelled (no deadline) while its attempt hangs on a frozen
// server returns within CancelMargin of the cancel: waiting to leave the
// queue shares the margin the hung attempt already used up.
func TestLeavingHangsWithinCancelMargin(t *testing.T) {
	m := leaving{newMemory()}
	c := newClient(t, m)
	m.freeze()
	defer m.thaw()
	ctx, cancel := context.WithCancel(context.Background())
	var cancelled time.Time
	time.AfterFunc(100*time.Millisecond, func() { cancelled = time.Now(); cancel() })
	if _, err := c.Lock(ctx, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Lock on a frozen server: %v, want Canceled", err)
	}
	// Two margins in a row (the hung attempt's, then leaving's) take at
	// least 2×CancelMargin.
	if took := time.Since(cancelled); took >= 2*dlock.CancelMargin {
		t.Fatalf("Lock returned %v after its ctx was cancelled, past CancelMargin (%v)", took, dlock.CancelMargin)
	}
}

// A TryLock joins no server-side queue (driver.Request.Wait is false), so
// one that fails has none to leave: on a frozen server it returns within
// one CancelMargin of its ctx's deadline, not two (its attempt's, then
// leaving's).
func TestFailedTryLockLeavesNoQueue(t *testing.T) {
	m := leaving{newMemory()}
	c := newClient(t, m)
	m.freeze()
	defer m.thaw()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	deadline, _ := ctx.Deadline()
	if _, err := c.TryLock(ctx, "x"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("TryLock on a frozen server: %v, want DeadlineExceeded", err)
	}
	if took := time.Since(deadline); took >= dlock.CancelMargin*3/2 {
		t.Fatalf("TryLock returned %v after its ctx's deadline; one CancelMargin (%v) is its bound", took, dlock.CancelMargin)
	}
}

// A TTL too short to renew (WithTTL(30) is 30ns) is refused, with why.
func TestTTLTooShort(t *testing.T) {
	for _, ttl := range []time.Duration{30, time.Millisecond, dlock.MinTTL - 1} {
		_, err := dlock.NewClient(newMemory(), dlock.WithTTL(ttl))
		if err == nil || !strings.Contains(err.Error(), "MinTTL") {
			t.Errorf("WithTTL(%v): %v, want an error naming MinTTL", ttl, err)
		}
	}
}

// Re-entry is bound to the call chain: a sibling goroutine sharing the
// Locker waits, the chain that carries the lease re-enters.
func TestReentryIsPerCallChain(t *testing.T) {
	c := newClient(t, newMemory())
	ctx := context.Background()
	outer, err := c.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	inner, err := c.TryLock(dlock.ContextWithLease(ctx, outer), "x")
	if err != nil || inner.Token() != outer.Token() {
		t.Fatalf("re-entry through the chain: %v", err)
	}
	if _, err := c.TryLock(ctx, "x"); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of another chain: %v, want ErrNotAcquired", err)
	}
	waited := make(chan dlock.Lease)
	go func() {
		l, err := c.Lock(ctx, "x")
		if err != nil {
			t.Error(err)
		}
		waited <- l
	}()
	inner.Unlock(ctx)
	outer.Unlock(ctx)
	next := <-waited
	if next == nil || next.Token() <= outer.Token() {
		t.Fatalf("the waiting chain's hold: %v", next)
	}
	next.Unlock(ctx)
}

// A grant that arrives past the client's deadline (the request hung on a
// frozen server longer than the TTL; the server granted it on waking) is
// confirmed by a renewal, not handed over lost on arrival.
func TestSlowGrantIsConfirmed(t *testing.T) {
	m := newMemory()
	ttl := 300 * time.Millisecond
	c := newClient(t, m, dlock.WithTTL(ttl))
	m.freeze()
	got := make(chan dlock.Lease, 1)
	go func() {
		lease, err := c.Lock(context.Background(), "x")
		if err != nil {
			t.Error(err)
		}
		got <- lease
	}()
	time.Sleep(2 * ttl) // the server stays frozen past the TTL
	m.thaw()
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	defer lease.Unlock(context.Background())
	if err := lease.Err(); err != nil {
		t.Fatalf("the slow grant was lost on arrival: %v", err)
	}
	if d := lease.Deadline(); !d.After(time.Now()) {
		t.Fatalf("the slow grant's deadline %v has passed", time.Until(d))
	}
}

// onBehalf is memory whose grants were made on the waiter's behalf before
// the attempt that returns them (driver.Grant.Since and Term), as a fair
// lock's release hands the lock to the head of its queue.
type onBehalf struct {
	*memory
	since time.Duration // how long before the attempt
	term  time.Duration
}

func (b onBehalf) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	g, err := b.memory.Acquire(ctx, r)
	if g.Acquired {
		g.Since, g.Term = time.Now().Add(-b.since), b.term
	}
	return g, err
}

// A grant made on the waiter's behalf counts its lease from Since for
// Term: the deadline precedes the server's expiry, wherever between
// Since and the attempt the server granted. The watchdog renews within
// the term, and then the lease runs for the TTL again.
func TestGrantOnBehalfCountsFromSince(t *testing.T) {
	m := newMemory()
	ttl, term, since := 30*time.Second, 600*time.Millisecond, 50*time.Millisecond
	c := newClient(t, onBehalf{memory: m, since: since, term: term}, dlock.WithTTL(ttl))
	before := time.Now()
	lease, err := c.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	if d, latest := lease.Deadline(), time.Now().Add(-since+term); d.After(latest) || d.Before(before.Add(-since)) {
		t.Fatalf("deadline %v after the lock, want at most %v (Since + Term)", time.Until(d), time.Until(latest))
	}
	// Renewed within the term, so still held past it, for the TTL.
	time.Sleep(term + term/2)
	if err := lease.Err(); err != nil {
		t.Fatalf("the lease ended at its first term: %v", err)
	}
	if d := lease.Deadline(); time.Until(d) < ttl/2 {
		t.Fatalf("after a renewal the deadline is %v away, want about the TTL %v", time.Until(d), ttl)
	}
}

// With no watchdog, a grant on the waiter's behalf for a term shorter
// than the TTL, or one whose Since is long past, is renewed before Lock
// returns: the lease the caller gets runs for the TTL.
func TestGrantOnBehalfIsConfirmed(t *testing.T) {
	for _, tc := range []struct {
		name        string
		since, term time.Duration
		opts        []dlock.Option
	}{
		{"short term, no watchdog", time.Millisecond, time.Second, []dlock.Option{dlock.WithoutAutoRenew()}},
		{"old since", 25 * time.Second, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMemory()
			ttl := 30 * time.Second
			c := newClient(t, onBehalf{memory: m, since: tc.since, term: tc.term}, append(tc.opts, dlock.WithTTL(ttl))...)
			lease, err := c.Lock(context.Background(), "x")
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Unlock(context.Background())
			m.mu.Lock()
			renewed := m.refreshN
			m.mu.Unlock()
			if renewed != 1 {
				t.Errorf("%d renewals before Lock returned, want 1", renewed)
			}
			if d := time.Until(lease.Deadline()); d < ttl*9/10 {
				t.Errorf("deadline %v away, want about the TTL %v", d, ttl)
			}
		})
	}
}

// A session-bound hold (a ZooKeeper node) whose release cannot reach the
// server for longer than its deadline plus a TTL is still released once
// the server is back: it does not expire, so giving up would block the
// name until the session ends.
func TestSessionBoundReleaseIsNeverAbandoned(t *testing.T) {
	m := newMemory()
	m.sessions = true
	ttl := 200 * time.Millisecond
	c := newClient(t, sessionMemory{m}, dlock.WithTTL(ttl))
	ctx := context.Background()
	lease, err := c.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	m.fail(errUnreachable)
	if err := lease.Unlock(ctx); err == nil || errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock with the server unreachable: %v", err)
	}
	time.Sleep(3 * ttl) // past the lease's deadline plus a TTL
	m.fail(nil)
	deadline := time.Now().Add(dlocktest.Timeout)
	for {
		if _, held, _ := m.Inspect(ctx, "x"); !held {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the session-bound hold was given up and never released")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close awaits a session-bound release being retried in the background
// (bounded by DefaultReleaseTimeout): a process that closes its Locker
// and exits right after has released what it could.
func TestCloseAwaitsLingeringReleases(t *testing.T) {
	m := newMemory()
	m.sessions = true
	c := newClient(t, sessionMemory{m}, dlock.WithTTL(time.Second))
	ctx := context.Background()
	lease, err := c.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	m.fail(errUnreachable)
	if err := lease.Unlock(ctx); err == nil {
		t.Fatal("Unlock with the server unreachable succeeded")
	}
	time.AfterFunc(300*time.Millisecond, func() { m.fail(nil) })
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, held, _ := m.Inspect(ctx, "x"); held {
		t.Fatal("Close returned before the lingering release, which could succeed within its bound, was made")
	}
}

// heldName returns a Client on a fresh in-memory backend, a name, and the
// Client's lease of it.
func heldName(t *testing.T) (*dlock.Client, string, dlock.Lease) {
	c := newClient(t, newMemory())
	name := dlocktest.Name(t)
	first, err := c.Lock(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return c, name, first
}

// Goroutines sharing a Client take a name in the order their Locks came;
// the goroutine that released cannot take it back ahead of them.
func TestLocalQueueIsFIFO(t *testing.T) {
	c, name, first := heldName(t)
	ctx := context.Background()
	const waiters = 4
	order := make(chan int, waiters+1)
	errs := make(chan error, waiters)
	for i := range waiters {
		go func() {
			lease, err := c.Lock(ctx, name)
			if err != nil {
				errs <- err
				return
			}
			order <- i
			errs <- lease.Unlock(ctx)
		}()
		dlocktest.Eventually(t, func() bool { return dlock.LocalWaiting(c, name) == i+1 }, "waiter queued")
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := c.Lock(ctx, name) // the releaser, at once: last in line
	if err != nil {
		t.Fatal(err)
	}
	order <- waiters
	if err := again.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for range waiters {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(order)
	want := 0
	for got := range order {
		if got != want {
			t.Fatalf("lock %d taken in turn %d: not first come, first served", got, want)
		}
		want++
	}
}

// A queued Lock whose ctx ends leaves the queue, and the next in line
// still gets the name.
func TestLocalQueueSkipsAbandonedWaiter(t *testing.T) {
	c, name, first := heldName(t)
	ctx := context.Background()
	actx, cancel := context.WithCancel(ctx)
	abandoned := make(chan error, 1)
	go func() {
		_, err := c.Lock(actx, name)
		abandoned <- err
	}()
	dlocktest.Eventually(t, func() bool { return dlock.LocalWaiting(c, name) == 1 }, "first waiter queued")
	next := make(chan error, 1)
	go func() {
		lease, err := c.Lock(ctx, name)
		if err == nil {
			err = lease.Unlock(ctx)
		}
		next <- err
	}()
	dlocktest.Eventually(t, func() bool { return dlock.LocalWaiting(c, name) == 2 }, "second waiter queued")
	cancel()
	if err := <-abandoned; !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("abandoned Lock = %v, want ErrNotAcquired", err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-next:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(dlocktest.Timeout):
		t.Fatal("the next waiter never got the name")
	}
}

// Unlock with a backend call that hangs (a frozen server, a driver that
// ignores ctx): the release is bounded by DefaultReleaseTimeout, not by the
// hung call. Unlock reports the failure, the release goes on in the
// background, and the name is taken again once the server answers.
func TestUnlockReturnsWhileReleaseHangs(t *testing.T) {
	t.Parallel()
	m := newMemory()
	c := newClient(t, m, dlock.WithTTL(time.Minute))
	ctx := context.Background()
	first, err := c.Lock(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	m.freeze()
	thawed := false
	defer func() {
		if !thawed {
			m.thaw()
		}
	}()
	start := time.Now()
	err = first.Unlock(ctx)
	if took := time.Since(start); took > dlock.DefaultReleaseTimeout+time.Second {
		t.Fatalf("Unlock took %v on a frozen server, want about DefaultReleaseTimeout (%v)", took, dlock.DefaultReleaseTimeout)
	}
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Unlock on a frozen server: %v, want a DeadlineExceeded failure", err)
	}
	m.thaw()
	thawed = true
	lockAfter(t, c, first)
}

// lockAfter locks first's name through c once more, and unlocks it: a new
// hold with a larger token, not a re-entry of first's.
func lockAfter(t *testing.T, c dlock.Locker, first dlock.Lease) {
	t.Helper()
	ctx := context.Background()
	next, err := c.Lock(ctx, first.Name())
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= first.Token() {
		t.Fatalf("token %d after %d: the old hold was re-entered", next.Token(), first.Token())
	}
	if err := next.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// With no watchdog, a lease nobody refreshes ends at its deadline, and
// its Err says that, not that a renewal failed.
func TestUnrefreshedLeaseSaysWhy(t *testing.T) {
	c := newClient(t, newMemory(), dlock.WithTTL(dlock.MinTTL), dlock.WithoutAutoRenew())
	lease, err := c.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-lease.Done():
	case <-time.After(dlocktest.Timeout):
		t.Fatal("the lease outlived its TTL")
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrLost) || !strings.Contains(err.Error(), "not refreshed") {
		t.Errorf("Err = %v, want ErrLost saying the lease was not refreshed", err)
	}
}

// Accepts refuses an option the constructor has no use for, of this
// package or a setting, and names it.
func TestAccepts(t *testing.T) {
	type otherKey struct{}
	cfg, err := dlock.NewConfig(dlock.WithTTL(time.Second), dlock.WithHandOffs(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Accepts("NewX", "WithTTL", "WithHandOffs"); err != nil {
		t.Fatalf("Accepts refused allowed options: %v", err)
	}
	if err := cfg.Accepts("NewX", "WithTTL"); err == nil || !strings.Contains(err.Error(), "NewX does not take dlock.WithHandOffs") {
		t.Fatalf("Accepts of WithHandOffs: %v", err)
	}
	cfg, err = dlock.NewConfig(dlock.WithSetting(otherKey{}, 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Accepts("NewX", "WithTTL"); err == nil || !strings.Contains(err.Error(), "an option of package dlock_test") {
		t.Fatalf("Accepts of a setting: %v", err)
	}
	if err := cfg.Accepts("NewX", otherKey{}); err != nil {
		t.Fatalf("Accepts refused an allowed setting: %v", err)
	}
	if err := (dlock.Config{}).Accepts("NewX"); err != nil {
		t.Fatalf("Accepts of no options: %v", err)
	}
}

// A Lock whose ctx ends while it waits between attempts, on a server that
// then does not answer its Leave, spends at most part of CancelMargin
// leaving the server's queue, and returns within the margin, not just
// past it. Only Leave hangs: an attempt caught hanging would use the
// whole margin by its own rule (see TestLeavingHangsWithinCancelMargin).
func TestLeavingKeepsPartOfTheMargin(t *testing.T) {
	m := hangingLeave{newMemory(), make(chan struct{})}
	holder, waiter := newClient(t, m), newClient(t, m)
	lease, err := holder.Lock(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan time.Time, 1)
	go func() {
		_, err := waiter.Lock(ctx, "x")
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Lock: %v, want Canceled", err)
		}
		returned <- time.Now()
	}()
	m.waitRefused(t)     // the waiter is between attempts
	defer close(m.leave) // leaving its queue hangs until the end
	cancelled := time.Now()
	cancel()
	if took := (<-returned).Sub(cancelled); took >= dlock.CancelMargin {
		t.Fatalf("Lock returned %v after its ctx was cancelled; CancelMargin is %v", took, dlock.CancelMargin)
	}
}
