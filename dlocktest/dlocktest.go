// Package dlocktest is the conformance suite every dlock.Locker passes. A
// backend's tests call Run with a Harness that makes Lockers on a real
// server:
//
//	func TestConformance(t *testing.T) {
//		dlocktest.Run(t, dlocktest.Harness{
//			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { … },
//		})
//	}
//
// Each property is one subtest. Lock names are unique per subtest, so the
// suite can run against a shared server.
package dlocktest

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

// Harness tells Run how to make Lockers of the backend under test.
type Harness struct {
	// New returns a new Locker with opts applied. New registers the
	// Locker's cleanup with t. The Locker must have a Close(ctx) error
	// method.
	New func(t *testing.T, opts ...dlock.Option) dlock.Locker
	// Broken returns a Locker whose connection or client its owner has
	// already closed: every call must fail at once, never retry until its
	// ctx ends. Every backend supplies it; a second topology of a backend
	// already run with it (a Cluster, a Sentinel, an ensemble) may leave it
	// nil, and the subtest is then not run.
	Broken func(t *testing.T) dlock.Locker
	// TTL is the short lease used by the expiry subtests. Default 1s.
	TTL time.Duration
	// Workers and Increments size the mutual-exclusion subtest: Workers
	// Lockers each add Increments to one counter. Defaults 10 and 100.
	Workers, Increments int
	// WaitersUncounted says that List's Waiters may leave out waiters
	// that poll: the lock table on PostgreSQL counts the processes queued
	// for a lock, which only those on pgx's driver are. The List subtest
	// then checks the count is a count, not that it saw the waiter.
	WaitersUncounted bool
	// Dial returns a new Locker, with opts applied, whose connections to
	// the server go to addr, a loopback proxy in front of Addr, instead.
	// The slow-server subtests (SlowServer) use it to delay the link
	// around dlock.CancelMargin; nil leaves them out.
	Dial func(t *testing.T, addr string, opts ...dlock.Option) dlock.Locker
	// Addr is the server's host:port, where Dial's proxy forwards to.
	Addr string
	// Stall, when set, makes the server hold every request on name (a
	// row lock taken and not let go, say) until resume is called: a
	// server that stalls on lock contention. SlowServer/Stalled uses it.
	Stall func(t *testing.T, name string) (resume func())
}

// Timeout bounds every wait in the suite that succeeds on a correct
// backend; reaching it is a failure, not a measurement.
const Timeout = 30 * time.Second

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("dlocktest: Harness.New is nil")
	}
	if h.TTL <= 0 {
		h.TTL = time.Second
	}
	if h.Workers <= 0 {
		h.Workers = 10
	}
	if h.Increments <= 0 {
		h.Increments = 100
	}
	s := suite{h}
	t.Run("MutualExclusion", s.mutualExclusion)
	t.Run("TryLockNeverWaits", s.tryLockNeverWaits)
	t.Run("Reentrancy", s.reentrancy)
	t.Run("TokensIncrease", s.tokensIncrease)
	t.Run("UnlockNotHeld", s.unlockNotHeld)
	t.Run("ExpiryTakeover", s.expiryTakeover)
	t.Run("LongTTL", s.longTTL)
	t.Run("ContextDeadline", s.contextDeadline)
	t.Run("ContextCancel", s.contextCancel)
	t.Run("WaitOnOwnChain", s.waitOnOwnChain)
	t.Run("InvalidNames", s.invalidNames)
	t.Run("SameLabel", s.sameLabel)
	t.Run("Inspect", s.inspect)
	t.Run("List", s.list)
	t.Run("ForceRelease", s.forceRelease)
	t.Run("Watch", s.watch)
	t.Run("LockOptions", s.lockOptions)
	t.Run("DoneAndErr", s.doneAndErr)
	t.Run("Do", s.do)
	t.Run("SharedLocker", s.sharedLocker)
	t.Run("DoPanics", s.doPanics)
	t.Run("DoArguments", s.doArguments)
	t.Run("CloseWithEndedContext", s.closeWithEndedContext)
	t.Run("CloseStopsWaiters", s.closeStopsWaiters)
	t.Run("EndedContext", s.endedContext)
	if h.Broken != nil {
		t.Run("ClosedConnection", s.closedConnection)
	}
	t.Run("UnlockWithEndedContext", s.unlockWithEndedContext)
	if h.Dial != nil {
		t.Run("SlowServer", s.slowServer)
	}
}

type suite struct{ h Harness }

// Name returns a lock name unique to t, safe for every backend.
func Name(t testing.TB) string {
	var b [4]byte
	_, _ = crand.Read(b[:])
	n := strings.NewReplacer("/", ".", " ", "_").Replace(t.Name()) + "." + hex.EncodeToString(b[:])
	if len(n) > dlock.MaxNameLen {
		n = n[len(n)-dlock.MaxNameLen:]
	}
	return n
}

// Eventually waits until cond reports true, checking every 10ms, and
// fails t with what when it has not within Timeout: tests wait for an
// observable condition, never for a fixed time.
func Eventually(t testing.TB, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", Timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// unlockAfterFailure gives back a lease a failing test should not have
// got, so that it does not block the tests after it, and reports an
// Unlock that fails.
func unlockAfterFailure(t testing.TB, lease dlock.Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := lease.Unlock(ctx); err != nil {
		t.Errorf("Unlock of the lease the test should not have got: %v", err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

func mustLock(t *testing.T, ctx context.Context, l dlock.Locker, name string) dlock.Lease {
	t.Helper()
	lease, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock(%q): %v", name, err)
	}
	return lease
}

func mustUnlock(t *testing.T, lease dlock.Lease) {
	t.Helper()
	if err := lease.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock(%q): %v", lease.Name(), err)
	}
}

// wantNotAcquired asserts a TryLock by l on name fails with ErrNotAcquired.
func wantNotAcquired(t *testing.T, l dlock.Locker, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	lease, err := l.TryLock(ctx, name)
	if err == nil {
		unlockAfterFailure(t, lease)
		t.Fatalf("TryLock(%q) succeeded while another owner holds it", name)
	}
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock(%q): %v, want ErrNotAcquired", name, err)
	}
	if ctx.Err() != nil {
		t.Fatalf("TryLock(%q) waited for the holder (ran into the %v bound)", name, Timeout)
	}
}

func wantAcquired(t *testing.T, l dlock.Locker, name string) dlock.Lease {
	t.Helper()
	lease, err := l.TryLock(ctxT(t), name)
	if err != nil {
		t.Fatalf("TryLock(%q) on a free name: %v", name, err)
	}
	return lease
}

// mutualExclusion is the seeds' counter test: workers, each its own owner,
// add to one counter under the lock with random re-entry. The counter is a
// read-modify-write split by a yield, so any overlap loses an update.
func (s suite) mutualExclusion(t *testing.T) {
	name := Name(t)
	ctx := ctxT(t)
	var (
		counter    atomic.Int64
		inside     atomic.Int32
		violations atomic.Int32
		wg         sync.WaitGroup
		errs       = make(chan error, s.h.Workers)
	)
	for w := 0; w < s.h.Workers; w++ {
		l := s.h.New(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < s.h.Increments; i++ {
				lease, err := l.Lock(ctx, name)
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					violations.Add(1)
				}
				var inner dlock.Lease
				if rand.IntN(4) == 0 {
					if inner, err = l.Lock(dlock.ContextWithLease(ctx, lease), name); err != nil {
						errs <- err
						return
					}
					if inner.Token() != lease.Token() {
						errs <- errors.New("re-entry changed the token")
					}
				}
				v := counter.Load()
				time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
				counter.Store(v + 1)
				if inner != nil {
					if err := inner.Unlock(ctx); err != nil {
						errs <- err
						return
					}
				}
				inside.Add(-1)
				if err := lease.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := int64(s.h.Workers * s.h.Increments)
	if got := counter.Load(); got != want {
		t.Errorf("counter = %d, want %d (%d updates lost)", got, want, want-got)
	}
	if v := violations.Load(); v != 0 {
		t.Errorf("%d times two owners were inside at once", v)
	}
}

func (s suite) tryLockNeverWaits(t *testing.T) {
	name := Name(t)
	a, b := s.h.New(t), s.h.New(t)
	lease := mustLock(t, ctxT(t), a, name)
	wantNotAcquired(t, b, name)
	mustUnlock(t, lease)
	mustUnlock(t, wantAcquired(t, b, name))
}

func (s suite) reentrancy(t *testing.T) {
	name := Name(t)
	ctx := ctxT(t)
	a, b := s.h.New(t), s.h.New(t)
	outer := mustLock(t, ctx, a, name)
	chain := dlock.ContextWithLease(ctx, outer)
	inner, err := a.TryLock(chain, name)
	if err != nil {
		t.Fatalf("re-entrant TryLock: %v", err)
	}
	third := mustLock(t, dlock.ContextWithLease(ctx, inner), a, name)
	// The same Locker without the lease in ctx is another call chain.
	wantNotAcquired(t, a, name)
	if inner.Token() != outer.Token() || third.Token() != outer.Token() {
		t.Fatalf("re-entry tokens %d, %d differ from %d", inner.Token(), third.Token(), outer.Token())
	}
	wantNotAcquired(t, b, name)
	mustUnlock(t, outer)
	wantNotAcquired(t, b, name)
	mustUnlock(t, third)
	wantNotAcquired(t, b, name)
	select {
	case <-inner.Done():
		t.Fatal("inner lease ended when another re-entry was unlocked")
	default:
	}
	mustUnlock(t, inner)
	mustUnlock(t, wantAcquired(t, b, name))
}

func (s suite) tokensIncrease(t *testing.T) {
	name := Name(t)
	ctx := ctxT(t)
	lockers := []dlock.Locker{s.h.New(t), s.h.New(t), s.h.New(t)}
	var last uint64
	for i := 0; i < 9; i++ {
		lease := mustLock(t, ctx, lockers[i%len(lockers)], name)
		if i > 0 && lease.Token() <= last {
			t.Fatalf("holder %d got token %d after %d", i, lease.Token(), last)
		}
		last = lease.Token()
		mustUnlock(t, lease)
	}
}

func (s suite) unlockNotHeld(t *testing.T) {
	name := Name(t)
	ctx := ctxT(t)
	a := s.h.New(t)
	lease := mustLock(t, ctx, a, name)
	mustUnlock(t, lease)
	if err := lease.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	if err := lease.Refresh(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh after Unlock: %v, want ErrNotHeld", err)
	}

	// A lease lost to expiry cannot be unlocked either.
	short := s.h.New(t, dlock.WithTTL(s.h.TTL), dlock.WithoutAutoRenew())
	lost := mustLock(t, ctx, short, name)
	waitDone(t, lost)
	if err := lost.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of an expired lease: %v, want ErrNotHeld", err)
	}
}

func waitDone(t *testing.T, lease dlock.Lease) {
	t.Helper()
	select {
	case <-lease.Done():
	case <-time.After(Timeout):
		t.Fatalf("lease %q did not end within %v", lease.Name(), Timeout)
	}
}

func (s suite) expiryTakeover(t *testing.T) {
	name := Name(t)
	ctx := ctxT(t)
	stale := s.h.New(t, dlock.WithTTL(s.h.TTL), dlock.WithoutAutoRenew())
	next := s.h.New(t)
	old := mustLock(t, ctx, stale, name)
	taken := mustLock(t, ctx, next, name)
	defer mustUnlock(t, taken)
	if taken.Token() <= old.Token() {
		t.Fatalf("new holder's token %d is not larger than the expired holder's %d", taken.Token(), old.Token())
	}
	select {
	case <-old.Done():
	default:
		t.Fatal("another owner took the lock while the old lease's Done was open")
	}
	if err := old.Err(); !errors.Is(err, dlock.ErrLost) {
		t.Fatalf("expired lease Err() = %v, want ErrLost", err)
	}
	// Only the holder may end or extend a lock: the old lease can
	// neither unlock nor refresh the new holder's.
	if err := old.Refresh(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Refresh of the expired lease: %v, want ErrNotHeld", err)
	}
	if err := old.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock of the expired lease: %v, want ErrNotHeld", err)
	}
	wantNotAcquired(t, s.h.New(t), name)
}

// longTTL holds locks with the longest leases a user may ask for (a
// month, and the longest time.Duration, a "forever"), or, for a Locker
// with a MaxTTL() time.Duration method (dlock.Client's, which reports the
// backend's bound), up to what it returns: the server must keep each one
// as long as its lease is open. A TTL converted to the server's units by adding before dividing
// wraps around at the top, and a lock then expires on the server at
// once, while its holder's Done stays open.
func (s suite) longTTL(t *testing.T) {
	ctx := ctxT(t)
	other := s.h.New(t)
	limit := time.Duration(math.MaxInt64)
	if b, ok := other.(interface{ MaxTTL() time.Duration }); ok {
		limit = b.MaxTTL()
	}
	for _, ttl := range []time.Duration{min(30*24*time.Hour, limit), limit} {
		name := Name(t)
		// A first hold of the name, with the default lease: a backend
		// that holds the first grant of a name back for a TTL after its
		// server restarted (Redis) grants this one after 30s at most.
		mustUnlock(t, mustLock(t, ctx, other, name))
		lease := mustLock(t, ctx, s.h.New(t, dlock.WithTTL(ttl)), name)
		// The wrapped-around expiry was a millisecond or less; a few
		// checks over 100ms would each have found the lock free.
		for range 5 {
			time.Sleep(20 * time.Millisecond)
			wantNotAcquired(t, other, name)
		}
		select {
		case <-lease.Done():
			t.Fatalf("TTL %v: Done closed while the lock was held: %v", ttl, lease.Err())
		default:
		}
		mustUnlock(t, lease)
		mustUnlock(t, mustLock(t, ctx, other, name))
	}
}

func (s suite) contextDeadline(t *testing.T) {
	s.waitEnds(t, func(ctx context.Context) (context.Context, func()) {
		return context.WithTimeout(ctx, 200*time.Millisecond)
	}, context.DeadlineExceeded)
}

func (s suite) contextCancel(t *testing.T) {
	s.waitEnds(t, func(ctx context.Context) (context.Context, func()) {
		ctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(200*time.Millisecond, cancel)
		return ctx, cancel
	}, context.Canceled)
}

// waitEnds checks that a Lock waiting for another owner returns when its ctx
// ends, with both errors, and leaves no lock behind.
func (s suite) waitEnds(t *testing.T, mk func(context.Context) (context.Context, func()), want error) {
	name := Name(t)
	holder, waiter, third := s.h.New(t), s.h.New(t), s.h.New(t)
	lease := mustLock(t, ctxT(t), holder, name)
	ctx, cancel := mk(context.Background())
	defer cancel()
	got, err := waiter.Lock(ctx, name)
	if err == nil {
		unlockAfterFailure(t, got)
		t.Fatal("Lock succeeded while another owner holds the name")
	}
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, want) {
		t.Fatalf("Lock: %v, want ErrNotAcquired and %v", err, want)
	}
	oneClearLine(t, err, want, "another owner")
	mustUnlock(t, lease)
	mustUnlock(t, wantAcquired(t, third, name))
	// The waiter can still lock: it left no half-taken state behind.
	mustUnlock(t, wantAcquired(t, waiter, name))
}

// oneClearLine checks a waiting Lock's error: one line, ctx's error once,
// the reason it waited named, no driver's words for the connection that
// ended the wait.
func oneClearLine(t *testing.T, err, ctxErr error, reason string) {
	t.Helper()
	msg := err.Error()
	switch {
	case strings.Contains(msg, "\n"):
		t.Fatalf("Lock's error spans several lines: %q", msg)
	case strings.Count(msg, ctxErr.Error()) != 1:
		t.Fatalf("Lock's error does not say %q exactly once: %q", ctxErr, msg)
	case !strings.Contains(msg, reason):
		t.Fatalf("Lock's error does not say it waited for %s: %q", reason, msg)
	}
	for _, noise := range []string{"SQLSTATE", "FATAL", "invalid connection", "EOF", "zk:", "redis:"} {
		if strings.Contains(msg, noise) {
			t.Fatalf("Lock's error carries the driver's %q: %q", noise, msg)
		}
	}
}

// waitOnOwnChain checks that a Lock waiting for a hold of its own
// process's other call chain says so when its ctx ends.
func (s suite) waitOnOwnChain(t *testing.T) {
	name := Name(t)
	l := s.h.New(t)
	lease := mustLock(t, ctxT(t), l, name)
	defer mustUnlock(t, lease)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	got, err := l.Lock(ctx, name) // the lease is not in ctx: another chain
	if err == nil {
		unlockAfterFailure(t, got)
		t.Fatal("Lock without the lease in ctx entered the hold")
	}
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock: %v, want ErrNotAcquired and context.DeadlineExceeded", err)
	}
	oneClearLine(t, err, context.DeadlineExceeded, "another call chain of this process")
}

func (s suite) invalidNames(t *testing.T) {
	l := s.h.New(t)
	ctx := ctxT(t)
	bad := map[string]string{
		"empty":     "",
		"NUL":       "a\x00b",
		"too long":  strings.Repeat("x", dlock.MaxNameLen+1),
		"bad UTF-8": "a\xffb",
	}
	for what, name := range bad {
		if _, err := l.Lock(ctx, name); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("Lock(%s): %v, want ErrInvalidName", what, err)
		}
		if _, err := l.TryLock(ctx, name); !errors.Is(err, dlock.ErrInvalidName) {
			t.Errorf("TryLock(%s): %v, want ErrInvalidName", what, err)
		}
		if in, ok := l.(dlock.Inspector); ok {
			if _, _, err := in.Inspect(ctx, name); !errors.Is(err, dlock.ErrInvalidName) {
				t.Errorf("Inspect(%s): %v, want ErrInvalidName", what, err)
			}
		}
	}
	// The longest valid name, and names that stress each backend's
	// encoding, all work.
	for _, name := range []string{
		strings.Repeat("é", dlock.MaxNameLen/2) + "x",
		"/a/../b/./c//", "Case", "case", "a b\tc\n", "锁:{x}*?[]",
	} {
		mustUnlock(t, wantAcquired(t, l, name))
	}
}

// sameLabel checks that an owner label is not an identity: Lockers with
// the same label, or with the owner id the holder shows, are other owners.
func (s suite) sameLabel(t *testing.T) {
	name := Name(t)
	ctx := ctxT(t)
	a, b := s.h.New(t, dlock.WithOwner("same-label")), s.h.New(t, dlock.WithOwner("same-label"))
	lease := mustLock(t, ctx, a, name)
	wantNotAcquired(t, b, name)
	if in, ok := a.(dlock.Inspector); ok {
		h, held, err := in.Inspect(ctx, name)
		if err != nil || !held {
			t.Fatalf("Inspect while held: held=%v err=%v", held, err)
		}
		if len(h.Owner) <= dlock.MaxOwnerLen {
			wantNotAcquired(t, s.h.New(t, dlock.WithOwner(h.Owner)), name)
		}
	}
	if len(lease.Owner()) <= dlock.MaxOwnerLen {
		wantNotAcquired(t, s.h.New(t, dlock.WithOwner(lease.Owner())), name)
	}
	mustUnlock(t, lease)
	mustUnlock(t, wantAcquired(t, b, name))
}

func (s suite) inspect(t *testing.T) {
	name := Name(t)
	ctx := ctxT(t)
	l := s.h.New(t)
	in, ok := l.(dlock.Inspector)
	if !ok {
		t.Fatalf("%T does not implement dlock.Inspector", l)
	}
	if _, held, err := in.Inspect(ctx, name); err != nil || held {
		t.Fatalf("Inspect of a free name: held=%v err=%v", held, err)
	}
	outer := mustLock(t, ctx, l, name)
	inner := mustLock(t, dlock.ContextWithLease(ctx, outer), l, name)
	h, held, err := in.Inspect(ctx, name)
	if err != nil || !held {
		t.Fatalf("Inspect while held: held=%v err=%v", held, err)
	}
	if h.Owner != outer.Owner() || h.Token != outer.Token() {
		t.Fatalf("Inspect = %+v, want owner %q token %d", h, outer.Owner(), outer.Token())
	}
	mustUnlock(t, inner)
	if _, held, _ := in.Inspect(ctx, name); !held {
		t.Fatal("Inspect: free after the first of two Unlocks")
	}
	mustUnlock(t, outer)
	if h, held, err := in.Inspect(ctx, name); err != nil || held {
		t.Fatalf("Inspect after the last Unlock: %+v held=%v err=%v", h, held, err)
	}
}

// list checks dlock.Lister, where the backend has it (a Locker on
// another returns errors.ErrUnsupported): the held names under a prefix,
// in name order, with their holders, names with characters a key or a
// pattern gives a meaning included; a name that only shares a shorter
// prefix is left out, a released one drops out, and limit bounds them.
func (s suite) list(t *testing.T) {
	type lister interface {
		List(ctx context.Context, prefix string, limit int) ([]dlock.Held, error)
	}
	ctx := ctxT(t)
	l := s.h.New(t)
	ls, ok := l.(lister)
	if !ok {
		t.Skipf("%T has no List", l)
	}
	prefix := Name(t) + "/"
	if _, err := ls.List(ctx, prefix, 0); errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%T's backend cannot list: %v", l, err)
	}
	names := []string{prefix + "a", prefix + "b*[?]", prefix + "c%7B{}/d"}
	start := time.Now()
	leases := map[string]dlock.Lease{}
	for _, n := range append([]string{strings.TrimSuffix(prefix, "/") + "x"}, names...) {
		leases[n] = mustLock(t, ctx, l, n)
	}
	check := func(limit int, want ...string) {
		t.Helper()
		held, err := ls.List(ctx, prefix, limit)
		if err != nil {
			t.Fatalf("List(%q, %d): %v", prefix, limit, err)
		}
		var got []string
		for _, h := range held {
			got = append(got, h.Name)
			if le := leases[h.Name]; le == nil || h.Owner != le.Owner() || h.Token != le.Token() {
				t.Errorf("List: %+v, want the holder of %q", h, h.Name)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("List(%q, %d) = %q, want %q", prefix, limit, got, want)
		}
	}
	check(0, names...)
	check(2, names[:2]...)
	mustUnlock(t, leases[names[1]])
	check(0, names[0], names[2])

	// A holder's age is no longer than it has held the lock (with a
	// second for a server's wall clock against this one's), and a waiter
	// in another Locker is counted where the backend counts them.
	waiting, stop := context.WithCancel(ctx)
	defer stop()
	gaveUp := make(chan struct{})
	go func() {
		defer close(gaveUp)
		if le, err := s.h.New(t).Lock(waiting, names[0]); err == nil {
			unlockAfterFailure(t, le) // granted only if the test failed first
		}
	}()
	Eventually(t, func() bool {
		held, err := ls.List(ctx, names[0], 0)
		if err != nil || len(held) != 1 {
			t.Fatalf("List(%q): %v %v", names[0], held, err)
		}
		h := held[0]
		if h.Age < 0 || h.Age > time.Since(start)+time.Second {
			t.Fatalf("List: %q held for %v, want at most %v", h.Name, h.Age, time.Since(start))
		}
		if h.Waiters < dlock.UnknownWaiters {
			t.Fatalf("List: %q has %d waiters", h.Name, h.Waiters)
		}
		return h.Waiters == dlock.UnknownWaiters || h.Waiters >= 1 || s.h.WaitersUncounted
	}, "the waiter counted by List")
	stop()
	<-gaveUp
}

// watch checks dlock.Watcher, where the Locker has it: another Locker's
// grant, its release, and a record written each push a change; a name
// not watched pushes none; the channel closes with ctx; a bad name is
// refused before any I/O.
func (s suite) watch(t *testing.T) {
	l := s.h.New(t)
	w, ok := l.(dlock.Watcher)
	if !ok {
		t.Skipf("%T does not push changes", l)
	}
	ctx := ctxT(t)
	if _, err := w.Watch(ctx, ""); !errors.Is(err, dlock.ErrInvalidName) {
		t.Fatalf("Watch of an empty name: %v, want ErrInvalidName", err)
	}
	name, other := Name(t), Name(t)
	wctx, stop := context.WithCancel(ctx)
	changes, err := w.Watch(wctx, name)
	if err != nil {
		t.Fatal(err)
	}
	pushed := func(what string) {
		t.Helper()
		select {
		case _, open := <-changes:
			if !open {
				t.Fatalf("the watch closed before %s", what)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no change pushed after %s", what)
		}
	}
	// quiet drains the pushes of what went before.
	quiet := func() {
		for {
			select {
			case <-changes:
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	holder := s.h.New(t)
	lease := mustLock(t, ctx, holder, name)
	pushed("a grant")
	quiet()
	if r, ok := holder.(dlock.Recorder); ok {
		if err := r.Record(ctx, name, lease.Token(), []byte("v")); err != nil {
			t.Fatal(err)
		}
		pushed("a record written")
		quiet()
	}
	o := mustLock(t, ctx, s.h.New(t), other)
	select {
	case <-changes:
		t.Fatal("a change pushed for a name not watched")
	case <-time.After(500 * time.Millisecond):
	}
	_ = o.Unlock(ctx)
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	pushed("a release")
	stop()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, open := <-changes:
			if !open {
				return
			}
		case <-deadline:
			t.Fatal("the watch did not close when its ctx ended")
		}
	}
}

// forceRelease checks dlock.ForceReleaser, where the backend has it: a
// free name evicts nobody; a held one is taken from its holder, whose
// lease ends (at its next renewal) and whose Unlock says it was not held,
// and a waiter gets it with a larger token.
func (s suite) forceRelease(t *testing.T) {
	type releaser interface {
		ForceRelease(ctx context.Context, name string) (dlock.Holder, bool, error)
	}
	ctx := ctxT(t)
	name := Name(t)
	operator := s.h.New(t)
	fr, ok := operator.(releaser)
	if !ok {
		t.Skipf("%T has no ForceRelease", operator)
	}
	_, ok, err := fr.ForceRelease(ctx, name)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skipf("%T's backend cannot force a release: %v", operator, err)
	}
	if err != nil || ok {
		t.Fatalf("ForceRelease of a free name: evicted=%v err=%v", ok, err)
	}
	held := mustLock(t, ctx, s.h.New(t, dlock.WithTTL(s.h.TTL)), name) // renewed every TTL/3
	granted := make(chan dlock.Lease, 1)
	waiter := s.h.New(t)
	go func() {
		l, err := waiter.Lock(ctx, name)
		if err != nil {
			t.Error(err)
		}
		granted <- l
	}()
	evicted, ok, err := fr.ForceRelease(ctx, name)
	if err != nil || !ok || evicted.Owner != held.Owner() || evicted.Token != held.Token() {
		t.Fatalf("ForceRelease: %+v evicted=%v err=%v, want the holder %q (token %d)", evicted, ok, err, held.Owner(), held.Token())
	}
	next := <-granted
	if next == nil {
		return
	}
	defer mustUnlock(t, next)
	if next.Token() <= held.Token() {
		t.Errorf("the next holder's token %d is not above the evicted holder's %d", next.Token(), held.Token())
	}
	select {
	case <-held.Done():
	case <-time.After(s.h.TTL + Timeout/10):
		t.Fatal("the evicted holder's lease is still open")
	}
	if err := held.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Errorf("Unlock of an evicted hold: %v, want ErrNotHeld", err)
	}
}

// lockOptions checks the per-call options (dlock.LockWith): a bad one
// fails before any I/O; LockTTL sets the lease the server keeps;
// WaitAtMost bounds a wait; a payload, where the backend keeps one, is
// what Inspect and List report, also for a hold handed on in the process,
// and a backend that keeps none refuses it.
func (s suite) lockOptions(t *testing.T) {
	ctx := ctxT(t)
	name := Name(t)
	l := s.h.New(t, dlock.WithoutAutoRenew())
	for _, opt := range []dlock.LockOption{dlock.LockTTL(time.Nanosecond), dlock.WithPayload(strings.Repeat("x", dlock.MaxPayloadLen+1)), dlock.WithPayload("a\nb"), nil} {
		if le, err := dlock.LockWith(ctx, l, name, opt); err == nil {
			unlockAfterFailure(t, le)
			t.Fatal("LockWith a bad option: no error")
		}
	}
	if _, err := dlock.TryLockWith(ctx, l, name, dlock.WaitAtMost(time.Second)); err == nil {
		t.Fatal("TryLockWith(WaitAtMost): no error")
	}

	// LockTTL: the server frees the hold after it, not after the
	// Locker's TTL (DefaultTTL), when nobody renews it.
	short, err := dlock.LockWith(ctx, l, name, dlock.LockTTL(s.h.TTL))
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(short.Deadline()); left > s.h.TTL {
		t.Fatalf("LockTTL(%v): deadline in %v", s.h.TTL, left)
	}
	other := s.h.New(t)
	next, err := other.Lock(ctx, name)
	if err != nil {
		t.Fatalf("Lock after a LockTTL(%v) hold that was not renewed: %v", s.h.TTL, err)
	}
	select {
	case <-short.Done():
	default:
		t.Fatal("another owner took the lock while the LockTTL lease's Done was open")
	}

	// WaitAtMost: a wait for a held name ends with ErrNotAcquired.
	for _, d := range []time.Duration{0, s.h.TTL / 4} {
		if le, err := dlock.LockWith(ctx, l, name, dlock.WaitAtMost(d)); !errors.Is(err, dlock.ErrNotAcquired) {
			if le != nil {
				unlockAfterFailure(t, le)
			}
			t.Fatalf("LockWith(WaitAtMost(%v)) of a held name: %v, want ErrNotAcquired", d, err)
		}
	}
	mustUnlock(t, next)
	s.payloads(t, name)
}

// payloads is lockOptions for WithPayload.
func (s suite) payloads(t *testing.T, name string) {
	ctx := ctxT(t)
	l := s.h.New(t)
	first, err := dlock.LockWith(ctx, l, name, dlock.WithPayload("deploy #1 by alice"))
	if errors.Is(err, errors.ErrUnsupported) {
		in, _ := l.(dlock.Inspector)
		if in != nil {
			if _, held, err := in.Inspect(ctx, name); err != nil || held {
				t.Fatalf("a refused payload left the name held (%v, %v)", held, err)
			}
		}
		t.Skipf("%T keeps no payload: %v", l, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	in := l.(dlock.Inspector)
	wantPayload := func(want string) {
		t.Helper()
		h, held, err := in.Inspect(ctx, name)
		if err != nil || !held || h.Payload != want {
			t.Fatalf("Inspect: %+v held=%v err=%v, want payload %q", h, held, err, want)
		}
		if ls, ok := l.(dlock.Lister); ok {
			all, err := ls.List(ctx, name, 0)
			if err != nil && !errors.Is(err, errors.ErrUnsupported) {
				t.Fatal(err)
			}
			for _, h := range all {
				if h.Name == name && h.Payload != want {
					t.Fatalf("List: %+v, want payload %q", h, want)
				}
			}
		}
	}
	wantPayload("deploy #1 by alice")
	// A chain of the same Locker waits with its own payload: the hold
	// handed on to it (or taken after the release) carries it.
	granted := make(chan dlock.Lease, 1)
	go func() {
		le, err := dlock.LockWith(ctx, l, name, dlock.WithPayload("deploy #2 by bob — ünïcode"), dlock.LockTTL(2*s.h.TTL))
		if err != nil {
			t.Error(err)
		}
		granted <- le
	}()
	time.Sleep(50 * time.Millisecond) // mostly queued behind first by now; either way it must hold with its payload
	mustUnlock(t, first)
	second := <-granted
	if second == nil {
		return
	}
	wantPayload("deploy #2 by bob — ünïcode")
	mustUnlock(t, second)
	plain := mustLock(t, ctx, l, name)
	wantPayload("")
	mustUnlock(t, plain)
}

func (s suite) doneAndErr(t *testing.T) {
	name := Name(t)
	lease := mustLock(t, ctxT(t), s.h.New(t), name)
	if lease.Name() != name {
		t.Fatalf("Name() = %q, want %q", lease.Name(), name)
	}
	select {
	case <-lease.Done():
		t.Fatal("Done closed while held")
	default:
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("Err() while held = %v", err)
	}
	mustUnlock(t, lease)
	select {
	case <-lease.Done():
	default:
		t.Fatal("Done open after Unlock")
	}
	if err := lease.Err(); !errors.Is(err, dlock.ErrUnlocked) {
		t.Fatalf("Err() after Unlock = %v, want ErrUnlocked", err)
	}
}

func (s suite) do(t *testing.T) {
	name := Name(t)
	a, b := s.h.New(t), s.h.New(t)
	ran := false
	err := dlock.Do(ctxT(t), a, name, func(ctx context.Context, lease dlock.Lease) error {
		ran = true
		wantNotAcquired(t, b, name)
		if lease.Name() != name || lease.Token() == 0 {
			t.Errorf("fn got lease %q with token %d", lease.Name(), lease.Token())
		}
		// fn's ctx carries the lease: a nested Lock re-enters.
		inner, err := a.TryLock(ctx, name)
		if err != nil {
			return err
		}
		if inner.Token() != lease.Token() {
			t.Errorf("nested Lock in Do got token %d, want %d", inner.Token(), lease.Token())
		}
		return inner.Unlock(ctx)
	})
	if err != nil || !ran {
		t.Fatalf("Do: ran=%v err=%v", ran, err)
	}
	mustUnlock(t, wantAcquired(t, b, name))

	boom := errors.New("boom")
	if err := dlock.Do(ctxT(t), a, name, func(context.Context, dlock.Lease) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Do returned %v, want fn's error", err)
	}
	mustUnlock(t, wantAcquired(t, b, name))

	held := mustLock(t, ctxT(t), b, name)
	err = dlock.TryDo(ctxT(t), a, name, func(context.Context, dlock.Lease) error {
		t.Error("TryDo ran fn while another owner held the name")
		return nil
	})
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryDo on a held name: %v, want ErrNotAcquired", err)
	}
	mustUnlock(t, held)
}
