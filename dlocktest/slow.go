package dlocktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/dlockhq/dlock"
)

// The slow-server subtests (Harness.Dial): the link to the server gets
// latency around dlock.CancelMargin, where a call whose reply is late
// must be waited for or given back, never forgotten or sent again on top
// of itself. Each fails on a hold left to a caller that was told it did
// not get one (a ghost), on "held by another owner" said of a name
// nobody holds, on a successor granted while the previous holder's Done
// was open, and on a call that returned later than its ctx allowed (its
// deadline plus dlock.CancelMargin, plus scheduling slack).

// slack is the scheduling delay a loaded test machine adds to a call's
// return beyond what dlock.CancelMargin allows.
const slack = 150 * time.Millisecond

// latencies are the link delays of the slow-server subtests, each with
// the direction it delays: the server's replies only (a request reaches
// the server at once, its reply comes late: the case where a call that
// gave up may have been granted), or both directions.
var latencies = []struct {
	delay   time.Duration
	replies bool
}{
	{dlock.CancelMargin / 2, true},
	{dlock.CancelMargin, false},
	{dlock.CancelMargin * 3 / 2, true},
	{3 * dlock.CancelMargin, false},
}

// slowTTL is the TTL of the slow Locker: long enough for the several
// round trips a grant, its confirmation and a renewal take on the link
// (a driver may add its own, as database/sql's check of a connection
// idle for a second).
func slowTTL(ttl, delay time.Duration) time.Duration {
	return max(ttl, 2*time.Second, 20*delay)
}

// link is a toxiproxy proxy in front of the server.
type link struct {
	t     *testing.T
	proxy *toxiproxy.Proxy
}

func newLink(t *testing.T, upstream string) *link {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "dlocktest", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("starting the proxy to %s: %v", upstream, err)
	}
	t.Cleanup(p.Stop)
	return &link{t: t, proxy: p}
}

func (l *link) addr() string { return l.proxy.Listen }

// slow delays the link's replies (and its requests unless replies) by d.
func (l *link) slow(d time.Duration, replies bool) {
	l.t.Helper()
	streams := []string{"downstream"}
	if !replies {
		streams = append(streams, "upstream")
	}
	for _, s := range streams {
		js := fmt.Sprintf(`{"name":"latency_%s","type":"latency","stream":%q,"attributes":{"latency":%d}}`, s, s, d.Milliseconds())
		if _, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(js)); err != nil {
			l.t.Fatalf("adding latency to the link: %v", err)
		}
	}
}

func (s suite) slowServer(t *testing.T) {
	for _, lat := range latencies {
		dir := "both"
		if lat.replies {
			dir = "replies"
		}
		t.Run(fmt.Sprintf("%s-%v", dir, lat.delay), func(t *testing.T) {
			lk := newLink(t, s.h.Addr)
			owner := "slow-" + Name(t)[len(Name(t))-8:]
			slow := s.h.Dial(t, lk.addr(), dlock.WithOwner(owner), dlock.WithTTL(slowTTL(s.h.TTL, lat.delay)))
			direct := s.h.New(t)
			s.warm(t, slow)
			// Bytes in flight when a toxic is added can be lost by the
			// proxy: let the warm-up's last replies arrive first.
			time.Sleep(100 * time.Millisecond)
			lk.slow(lat.delay, lat.replies)
			sl := slowCase{t: t, s: s, slow: slow, direct: direct, owner: owner, delay: lat.delay, replies: lat.replies}
			t.Run("TryLock", sl.tryLock)
			t.Run("TryLockShortCtx", sl.tryLockShort)
			t.Run("LockShortCtx", sl.lockShort)
			t.Run("UnlockShortCtx", sl.unlockShort)
			t.Run("Renewal", sl.renewal)
		})
	}
	if s.h.Stall != nil {
		t.Run("Stalled", s.stalled)
	}
}

// warm makes one lock and unlock through l, so that its connections are
// open before the link slows down: the subtests measure calls, not
// connection set-up.
func (s suite) warm(t *testing.T, l dlock.Locker) {
	t.Helper()
	name := Name(t)
	mustUnlock(t, mustLock(t, ctxT(t), l, name))
}

// slowCase is one latency of the slow-server subtests.
type slowCase struct {
	t            *testing.T
	s            suite
	slow, direct dlock.Locker
	owner        string // slow's owner label
	delay        time.Duration
	replies      bool
}

// settle is how long a give-back may take to reach the server after the
// call that started it returned: a few round trips on the slow link.
func (sl slowCase) settle() time.Duration { return 10*sl.delay + 2*time.Second }

// call runs f with a ctx of timeout d (0: Timeout) and checks that it
// returned within the ctx's deadline plus CancelMargin.
func (sl slowCase) call(t *testing.T, what string, d time.Duration, f func(ctx context.Context) error) (err error, ctxErr error) {
	t.Helper()
	if d == 0 {
		d = Timeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	err = f(ctx)
	took := time.Since(start)
	if took > d+dlock.CancelMargin+slack {
		t.Errorf("%s with a ctx of %v returned after %v: past its deadline plus CancelMargin (%v)", what, d, took, dlock.CancelMargin)
	}
	if took >= d { // ctx's timer may not have fired yet
		return err, context.DeadlineExceeded
	}
	return err, ctx.Err()
}

// wantHonest checks err, from a call on a name nobody else holds whose
// ctx ended with ctxErr (nil: it had not): "not acquired" only because
// ctx ended, and never a claim that another owner holds the name.
func wantHonest(t *testing.T, what string, err, ctxErr error) {
	t.Helper()
	if err == nil {
		return
	}
	if strings.Contains(err.Error(), "another owner") {
		t.Errorf("%s on a name nobody else holds: %v (it claims another owner holds it)", what, err)
	}
	if ctxErr == nil {
		t.Errorf("%s on a name nobody else holds failed with its ctx live: %v", what, err)
	}
}

// notMine fails t when the direct Locker's Inspect shows name held by
// the slow Locker's owner label.
func (sl slowCase) notMine(t *testing.T, name, when string) {
	t.Helper()
	if sl.mine(t, name) {
		t.Errorf("%s: %q is held by the caller that was told it did not get it", when, name)
	}
}

// free checks that name ends up free of the slow Locker's holds: the
// direct Locker takes it within settle, and after it lets go nothing of
// the slow Locker's comes back (a late grant the give-back missed).
func (sl slowCase) free(t *testing.T, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sl.settle())
	defer cancel()
	lease, err := sl.direct.Lock(ctx, name)
	if err != nil {
		in, _ := sl.direct.(dlock.Inspector)
		var holder string
		if in != nil {
			if h, ok, err := in.Inspect(ctxT(t), name); err == nil && ok {
				holder = fmt.Sprintf(" (held by %s, token %d)", h.Owner, h.Token)
			}
		}
		t.Fatalf("%q was not free within %v after the slow caller gave up%s: %v", name, sl.settle(), holder, err)
	}
	mustUnlock(t, lease)
	// A request cut off with its connection may reach the server after
	// the give-back the Locker sent on another (this proxy delivers what
	// it holds when a connection closes): the Locker gives that back
	// too, within a few round trips, not at the grant's TTL.
	time.Sleep(2 * sl.delay)
	for end := time.Now().Add(sl.settle()); sl.mine(t, name) && time.Now().Before(end); {
		time.Sleep(sl.delay/2 + 10*time.Millisecond)
	}
	sl.notMine(t, name, fmt.Sprintf("%v after the give-back", sl.settle()))
}

// mine reports whether the direct Locker's Inspect shows name held by
// the slow Locker's owner label.
func (sl slowCase) mine(t *testing.T, name string) bool {
	t.Helper()
	in, ok := sl.direct.(dlock.Inspector)
	if !ok {
		return false
	}
	h, held, err := in.Inspect(ctxT(t), name)
	if err != nil {
		t.Fatalf("Inspect(%q): %v", name, err)
	}
	return held && strings.HasPrefix(h.Owner, sl.owner)
}

// tryLock: with time to wait, TryLock waits for the late reply; a free
// name is granted.
func (sl slowCase) tryLock(t *testing.T) {
	name := Name(t)
	var lease dlock.Lease
	err, ctxErr := sl.call(t, "TryLock", 0, func(ctx context.Context) (err error) {
		lease, err = sl.slow.TryLock(ctx, name)
		return err
	})
	if err != nil {
		wantHonest(t, "TryLock", err, ctxErr)
		t.Fatalf("TryLock of a free name on a slow server, with time to wait: %v", err)
	}
	err, _ = sl.call(t, "Unlock", 0, lease.Unlock)
	if err != nil {
		t.Fatalf("Unlock on a slow server, with time to wait: %v", err)
	}
	sl.notMine(t, name, "after Unlock returned")
}

// tryLockShort: a TryLock whose ctx ends before the reply comes leaves
// nothing held, right after it returns when only replies are late.
func (sl slowCase) tryLockShort(t *testing.T) {
	for _, d := range []time.Duration{sl.delay / 2, sl.delay * 3 / 2} {
		name := Name(t)
		var lease dlock.Lease
		err, ctxErr := sl.call(t, "TryLock", d, func(ctx context.Context) (err error) {
			lease, err = sl.slow.TryLock(ctx, name)
			return err
		})
		if err == nil {
			mustUnlock(t, lease)
			continue
		}
		wantHonest(t, "TryLock", err, ctxErr)
		if sl.replies && 2*sl.delay <= dlock.CancelMargin {
			// The reply and a give-back fit in CancelMargin.
			sl.notMine(t, name, "right after the failed TryLock")
		}
		sl.free(t, name)
	}
}

// lockShort: a Lock that waits for a holder who lets go at about the
// moment the waiter's ctx ends leaves nothing held when it fails.
func (sl slowCase) lockShort(t *testing.T) {
	for i, d := range []time.Duration{sl.delay, 3 * sl.delay} {
		name := Name(t)
		held := mustLock(t, ctxT(t), sl.direct, name)
		release := time.AfterFunc(d*time.Duration(2+i)/4, func() { _ = held.Unlock(context.Background()) })
		var lease dlock.Lease
		err, _ := sl.call(t, "Lock", d, func(ctx context.Context) (err error) {
			lease, err = sl.slow.Lock(ctx, name)
			return err
		})
		if !release.Stop() {
			<-held.Done()
		} else {
			mustUnlock(t, held)
		}
		if err == nil {
			mustUnlock(t, lease)
			continue
		}
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("Lock whose ctx ended: %v, want ErrNotAcquired", err)
		}
		sl.free(t, name)
	}
}

// unlockShort: Unlock with a ctx shorter than a round trip returns by
// it, its lease ended at once, and the lock is released all the same.
func (sl slowCase) unlockShort(t *testing.T) {
	name := Name(t)
	lease := mustLock(t, ctxT(t), sl.slow, name)
	err, ctxErr := sl.call(t, "Unlock", sl.delay/2, lease.Unlock)
	select {
	case <-lease.Done():
	default:
		t.Errorf("Done still open after Unlock returned (%v)", err)
	}
	if err != nil && ctxErr == nil {
		t.Errorf("Unlock with its ctx live: %v", err)
	}
	sl.free(t, name)
}

// renewal: a holder on the slow link keeps its lease only while its
// renewals are confirmed, and the next owner is granted only after the
// holder's Done closed.
func (sl slowCase) renewal(t *testing.T) {
	name := Name(t)
	ttl := slowTTL(sl.s.h.TTL, sl.delay)
	holder := mustLock(t, ctxT(t), sl.slow, name)
	defer func() { _ = holder.Unlock(context.Background()) }()
	var (
		mu       sync.Mutex
		doneAt   time.Time
		grantAt  time.Time
		watching = make(chan struct{})
	)
	go func() {
		defer close(watching)
		<-holder.Done()
		mu.Lock()
		doneAt = time.Now()
		mu.Unlock()
	}()
	// Three renewals' worth: a holder whose renewals get through keeps
	// the lock all along; one whose renewals are too slow loses it, and
	// learns it first.
	ctx, cancel := context.WithTimeout(context.Background(), ttl)
	defer cancel()
	next, err := sl.direct.Lock(ctx, name)
	if err == nil {
		mu.Lock()
		grantAt = time.Now()
		mu.Unlock()
		select {
		case <-holder.Done():
		default:
			t.Errorf("a successor was granted (token %d) while the holder's Done was open (token %d)", next.Token(), holder.Token())
		}
		if next.Token() <= holder.Token() {
			t.Errorf("successor's token %d is not larger than the holder's %d", next.Token(), holder.Token())
		}
		mustUnlock(t, next)
	} else if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("Lock of a held name: %v", err)
	}
	_ = holder.Unlock(context.Background())
	<-watching
	mu.Lock()
	defer mu.Unlock()
	if !grantAt.IsZero() && doneAt.After(grantAt) {
		t.Errorf("the holder's Done closed %v after its successor was granted", doneAt.Sub(grantAt))
	}
}

// stalled: the server holds every request on the name (Harness.Stall)
// while TryLock and Lock with short ctxs run; they fail by their ctx,
// without claiming another owner, and leave nothing held once the server
// goes on.
func (s suite) stalled(t *testing.T) {
	owner := "stalled-" + Name(t)[len(Name(t))-8:]
	l := s.h.New(t, dlock.WithOwner(owner))
	direct := s.h.New(t)
	sl := slowCase{t: t, s: s, slow: l, direct: direct, owner: owner}
	for _, try := range []bool{true, false} {
		name := Name(t)
		mustUnlock(t, mustLock(t, ctxT(t), direct, name))
		resume := s.h.Stall(t, name)
		err, ctxErr := sl.call(t, "a call on a stalled server", 300*time.Millisecond, func(ctx context.Context) error {
			var (
				lease dlock.Lease
				err   error
			)
			if try {
				lease, err = l.TryLock(ctx, name)
			} else {
				lease, err = l.Lock(ctx, name)
			}
			if err == nil {
				_ = lease.Unlock(context.Background())
			}
			return err
		})
		resume()
		if err == nil {
			t.Fatal("a call on a stalled server succeeded within its ctx")
		}
		wantHonest(t, "a call on a stalled server", err, ctxErr)
		sl.free(t, name)
	}
}
