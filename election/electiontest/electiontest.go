// Package electiontest is the suite every backend's Locker passes to hold
// elections (package election), as dlocktest is for its locks. A
// backend's tests call Run with a Harness that makes Lockers on a real
// server:
//
//	func TestElection(t *testing.T) {
//		electiontest.Run(t, electiontest.Harness{
//			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { … },
//		})
//	}
//
// One subtest (PausedLeader) runs the test again in a child process and
// freezes it (SIGSTOP): the test binary must be able to run its own
// tests again, which go test's binaries can.
package electiontest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/election"
	"github.com/dlockhq/dlock/internal/subproc"
)

// Harness tells Run how to make Lockers of the backend under test.
type Harness struct {
	// New returns a new Locker with opts applied, on the backend's
	// servers; a candidate each. New registers its cleanup with t.
	New func(t *testing.T, opts ...dlock.Option) dlock.Locker
	// Broken returns a Locker whose connection its owner has closed; nil
	// skips the subtest that campaigns on one.
	Broken func(t *testing.T) dlock.Locker
	// TTL is the lease of the subtests whose leaders lose it. Default 1s.
	TTL time.Duration
	// OwnServers says that New's servers belong to this process (started
	// by the test): a child process would start its own, so the subtest
	// that needs one (PausedLeader) is not run.
	OwnServers bool
}

// Candidates is how many candidates campaign at once in OneLeader.
const Candidates = 10

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("electiontest: Harness.New is nil")
	}
	if h.TTL <= 0 {
		h.TTL = time.Second
	}
	s := suite{h}
	if os.Getenv(childEnv) != "" {
		// A child process: only PausedLeader runs here (see Start).
		t.Run("PausedLeader", s.pausedLeader)
		return
	}
	t.Run("Records", s.records)
	t.Run("OneLeader", s.oneLeader)
	t.Run("ResignHandsOver", s.resignHandsOver)
	t.Run("HandOverBound", s.handOverBound)
	t.Run("LeaderAndObserve", s.leaderAndObserve)
	t.Run("ObservePushes", s.observePushes)
	t.Run("LostLeadership", s.lostLeadership)
	if !h.OwnServers {
		t.Run("PausedLeader", s.pausedLeader)
	}
	t.Run("CampaignCtx", s.campaignCtx)
	if h.Broken != nil {
		t.Run("BrokenCandidate", s.brokenCandidate)
	}
	t.Run("BadInput", s.badInput)
}

type suite struct{ h Harness }

func (s suite) election(t *testing.T, name string, opts ...election.Option) *election.Election {
	t.Helper()
	return s.electionOn(t, s.h.New(t), name, opts...)
}

func (s suite) electionOn(t *testing.T, l dlock.Locker, name string, opts ...election.Option) *election.Election {
	t.Helper()
	e, err := election.New(l, name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

func campaign(t *testing.T, ctx context.Context, e *election.Election, value string) *election.Leadership {
	t.Helper()
	ld, err := e.Campaign(ctx, value)
	if err != nil {
		t.Fatalf("Campaign(%q): %v", value, err)
	}
	t.Cleanup(func() { _ = ld.Resign(context.Background()) })
	return ld
}

func resign(t *testing.T, ld *election.Leadership) {
	t.Helper()
	if err := ld.Resign(ctxT(t)); err != nil {
		t.Fatalf("Resign: %v", err)
	}
}

// oneLeader: Candidates candidates campaign, lead briefly and resign, two
// terms each; never two leaders at once, and each term is larger than
// the one before.
func (s suite) oneLeader(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t)
	var (
		leaders atomic.Int32
		mu      sync.Mutex
		terms   []uint64
		wg      sync.WaitGroup
	)
	errs := make(chan error, Candidates*2)
	for c := range Candidates {
		e := s.election(t, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2 {
				ld, err := e.Campaign(ctx, fmt.Sprint("candidate ", c))
				if err != nil {
					errs <- err
					return
				}
				if n := leaders.Add(1); n != 1 {
					errs <- fmt.Errorf("%d leaders at once", n)
				}
				mu.Lock()
				if len(terms) > 0 && ld.Term() <= terms[len(terms)-1] {
					errs <- fmt.Errorf("term %d after term %d", ld.Term(), terms[len(terms)-1])
				}
				terms = append(terms, ld.Term())
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				leaders.Add(-1)
				if err := ld.Resign(ctx); err != nil {
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
	if len(terms) != 2*Candidates {
		t.Errorf("%d terms, want %d", len(terms), 2*Candidates)
	}
}

// resignHandsOver: Resign cancels the leader's work and waits for it to
// stop before the next candidate wins; the winner's term is larger.
func (s suite) resignHandsOver(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t)
	a, b := s.election(t, name), s.election(t, name)
	first := campaign(t, ctx, a, "a")
	var stopped atomic.Bool
	first.Go(func(ctx context.Context) {
		<-ctx.Done()
		time.Sleep(200 * time.Millisecond) // the work winds down
		stopped.Store(true)
	})
	won := make(chan *election.Leadership, 1)
	go func() {
		ld, err := b.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		won <- ld
	}()
	time.Sleep(100 * time.Millisecond) // b waits
	resign(t, first)
	if !errors.Is(first.Err(), election.ErrResigned) {
		t.Errorf("Err after Resign = %v, want ErrResigned", first.Err())
	}
	if !errors.Is(context.Cause(first.Context()), election.ErrResigned) {
		t.Errorf("Context's cause after Resign = %v, want ErrResigned", context.Cause(first.Context()))
	}
	second := <-won
	if second == nil {
		return
	}
	defer resign(t, second)
	if !stopped.Load() {
		t.Error("the next leader won before the resigned leader's work stopped")
	}
	if second.Term() <= first.Term() {
		t.Errorf("term %d after term %d", second.Term(), first.Term())
	}
}

// handOverBound: work that ignores its ctx holds the hand-over only for
// the bound; Resign says so.
func (s suite) handOverBound(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t)
	e := s.election(t, name, election.WithHandOver(300*time.Millisecond))
	ld := campaign(t, ctx, e, "stuck")
	release := make(chan struct{})
	defer close(release)
	ld.Go(func(context.Context) { <-release })
	err := ld.Resign(ctx)
	if !errors.Is(err, election.ErrWorkRunning) {
		t.Fatalf("Resign with work that does not stop = %v, want ErrWorkRunning", err)
	}
	next := campaign(t, ctx, s.election(t, name), "next")
	resign(t, next)
}

// leaderAndObserve: Leader and Observe report each leader, its value,
// its proclaimed values and the vacancies between them, in order.
// observePushes: on a Locker that pushes changes (dlock.Watcher), Observe
// reports a new leader, a proclaimed value and a vacancy within moments,
// with an interval too long for any read at an interval to see them.
func (s suite) observePushes(t *testing.T) {
	l := s.h.New(t)
	if _, ok := l.(dlock.Watcher); !ok {
		t.Skipf("%T does not push changes: Observe reads at an interval (LeaderAndObserve)", l)
	}
	name := dlocktest.Name(t)
	ctx := ctxT(t)
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := s.electionOn(t, l, name, election.WithObserveInterval(time.Hour)).Observe(octx)
	const prompt = 3 * time.Second
	next := func(what string, ok func(election.Observation) bool) {
		t.Helper()
		deadline := time.After(prompt)
		for {
			select {
			case o, open := <-obs:
				if !open {
					t.Fatalf("Observe closed while waiting for %s", what)
				}
				if ok(o) {
					return
				}
			case <-deadline:
				t.Fatalf("Observe did not report %s within %v (its interval is an hour)", what, prompt)
			}
		}
	}
	isVacant := func(o election.Observation) bool { return o.Vacant }
	next("the vacancy at the start", isVacant)
	a := campaign(t, ctx, s.election(t, name), "a1")
	next("the leader", func(o election.Observation) bool { return !o.Vacant && o.Leader.Term == a.Term() })
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	next("the proclaimed value", func(o election.Observation) bool { return !o.Vacant && o.Leader.Value == "a2" })
	resign(t, a)
	next("the vacancy after Resign", isVacant)
}

func (s suite) leaderAndObserve(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t)
	watcher := s.election(t, name, election.WithObserveInterval(20*time.Millisecond))
	if _, err := watcher.Leader(ctx); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader with nobody leading = %v, want ErrNoLeader", err)
	}
	octx, stop := context.WithCancel(ctx)
	defer stop()
	obs := watcher.Observe(octx)
	next := func(what string, ok func(election.Observation) bool) election.Observation {
		t.Helper()
		for {
			select {
			case o, open := <-obs:
				if !open {
					t.Fatalf("Observe closed while waiting for %s", what)
				}
				if ok(o) {
					return o
				}
				t.Logf("observed %+v while waiting for %s", o, what)
			case <-ctx.Done():
				t.Fatalf("Observe never reported %s", what)
			}
		}
	}
	isVacant := func(o election.Observation) bool { return o.Vacant }
	next("the vacancy at the start", isVacant)

	before := time.Now()
	a := campaign(t, ctx, s.election(t, name), "a1")
	o := next("the first leader", func(o election.Observation) bool { return !o.Vacant })
	if o.Leader.Term != a.Term() || o.Leader.Value != "a1" {
		t.Fatalf("observed %+v, want term %d value a1", o.Leader, a.Term())
	}
	l, err := watcher.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Term != a.Term() || l.Value != "a1" || l.Owner != a.Owner() {
		t.Fatalf("Leader = %+v, want term %d, value a1 and owner %q", l, a.Term(), a.Owner())
	}
	if slack := time.Second; l.Since.Before(before.Add(-slack)) || l.Since.After(time.Now().Add(slack)) {
		t.Errorf("Leader.Since = %v, not between the campaign's start (%v) and now", l.Since, before)
	}
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	if a.Value() != "a2" {
		t.Errorf("Value after Proclaim = %q", a.Value())
	}
	o = next("the proclaimed value", func(o election.Observation) bool { return !o.Vacant && o.Leader.Value == "a2" })
	if o.Leader.Term != a.Term() {
		t.Fatalf("observed %+v after Proclaim, want term %d", o.Leader, a.Term())
	}
	resign(t, a)
	next("the vacancy after Resign", isVacant)
	b := campaign(t, ctx, s.election(t, name), "b1")
	o = next("the second leader", func(o election.Observation) bool { return !o.Vacant })
	if o.Leader.Term != b.Term() || o.Leader.Value != "b1" || b.Term() <= a.Term() {
		t.Fatalf("observed %+v, want term %d (> %d) value b1", o.Leader, b.Term(), a.Term())
	}
	resign(t, b)
	next("the vacancy at the end", isVacant)
	stop()
	for o := range obs { // drains, then closes
		if !o.Vacant && o.Leader.Term < b.Term() {
			t.Errorf("observed term %d after term %d", o.Leader.Term, b.Term())
		}
	}
}

// lostLeadership: a leader whose lease is not renewed loses leadership;
// Done closes and Context is cancelled before the successor wins, and
// its Proclaim is refused afterwards.
func (s suite) lostLeadership(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t)
	e := s.electionOn(t, s.h.New(t, dlock.WithTTL(s.h.TTL), dlock.WithoutAutoRenew()), name)
	a := campaign(t, ctx, e, "a")
	b := campaign(t, ctx, s.election(t, name), "b")
	select {
	case <-a.Done():
	default:
		t.Fatal("a successor won while the leader's Done was open")
	}
	select {
	case <-a.Context().Done():
	case <-time.After(time.Second):
		t.Fatal("the lost leader's Context was not cancelled")
	}
	if !errors.Is(a.Err(), dlock.ErrLost) {
		t.Errorf("Err after the loss = %v, want dlock.ErrLost", a.Err())
	}
	if err := a.Proclaim(ctx, "stale"); err == nil {
		t.Error("a lost leader's Proclaim succeeded")
	}
	if err := a.Resign(ctx); !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Resign after the loss = %v, want it to report dlock.ErrLost", err)
	}
	if b.Term() <= a.Term() {
		t.Errorf("term %d after term %d", b.Term(), a.Term())
	}
	l, err := e.Leader(ctx)
	if err != nil || l.Term != b.Term() || l.Value != "b" {
		t.Errorf("Leader = %+v, %v; want the successor's term %d and value", l, err, b.Term())
	}
	resign(t, b)
}

// The child process of pausedLeader.
const (
	childEnv    = "DLOCK_ELECTIONTEST_CHILD"
	childPrefix = "electiontest: "
)

// pausedLeader: a leader in another process, frozen (SIGSTOP) past its
// TTL, is replaced by a candidate with a larger term; resumed, its writes
// fenced by its term (Proclaim, and a raw record write) are refused, and
// it learns that it lost.
func (s suite) pausedLeader(t *testing.T) {
	if name := os.Getenv(childEnv); name != "" {
		s.pausedChild(t, name)
		return
	}
	name := dlocktest.Name(t)
	ctx := ctxT(t)
	child := subproc.Start(t, childPrefix, childEnv+"="+name)
	var term uint64
	if _, err := fmt.Sscanf(child.Next(t, dlocktest.Timeout), "leader %d", &term); err != nil {
		t.Fatal(err)
	}
	child.Signal(t, syscall.SIGSTOP)
	e := s.election(t, name)
	next := campaign(t, ctx, e, "successor")
	if next.Term() <= term {
		t.Fatalf("successor's term %d, not above the paused leader's %d", next.Term(), term)
	}
	child.Signal(t, syscall.SIGCONT)
	for lost := false; !lost; {
		line := child.Next(t, dlocktest.Timeout)
		switch {
		case line == "lost":
			lost = true
		case line == "proclaimed":
			t.Error("the deposed leader's Proclaim succeeded after its successor won")
		case line == "refused" || strings.HasPrefix(line, "failed"):
			// A write the server would not take: fenced, or its session is gone.
		default:
			t.Logf("child: %s", line)
		}
	}
	switch line := child.Next(t, dlocktest.Timeout); {
	case line == "refused" || strings.HasPrefix(line, "failed"):
		t.Logf("the deposed leader's write: %s", line)
	default:
		t.Errorf("the deposed leader's write, fenced by its term: %s", line)
	}
	l, err := e.Leader(ctx)
	if err != nil || l.Term != next.Term() || l.Value != "successor" {
		t.Errorf("Leader = %+v, %v; want the successor's term %d and value", l, err, next.Term())
	}
	resign(t, next)
}

// pausedChild is pausedLeader's leader: it campaigns, says so, and then
// writes as leader until it learns it lost; frozen in between.
func (s suite) pausedChild(t *testing.T, name string) {
	ctx := ctxT(t)
	l := s.h.New(t, dlock.WithTTL(s.h.TTL))
	e := s.electionOn(t, l, name)
	ld := campaign(t, ctx, e, "paused")
	subproc.Say(childPrefix, "leader %d", ld.Term())
	write := func(ctx context.Context) {
		// Proclaim checks the lease first; the raw write is what a
		// resumed leader whose timers have not fired yet would send.
		err := l.(dlock.Recorder).Record(ctx, electionRecord+name, ld.Term(), []byte("paused"))
		switch {
		case err == nil:
			subproc.Say(childPrefix, "accepted")
		case errors.Is(err, dlock.ErrStale):
			subproc.Say(childPrefix, "refused")
		default:
			subproc.Say(childPrefix, "failed: %v", err)
		}
	}
	for ld.Err() == nil {
		write(ctx)
		time.Sleep(10 * time.Millisecond)
	}
	if err := ld.Proclaim(ctx, "paused"); err == nil {
		subproc.Say(childPrefix, "proclaimed")
	}
	subproc.Say(childPrefix, "lost")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	write(wctx)
	<-ctx.Done()
}

// electionRecord starts the name of an election's record (package
// election's recordPrefix).
const electionRecord = "election:"

// campaignCtx: a Campaign whose ctx ends while another leads returns
// dlock.ErrNotAcquired with ctx's error.
func (s suite) campaignCtx(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t)
	a := campaign(t, ctx, s.election(t, name), "a")
	defer resign(t, a)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	_, err := s.election(t, name).Campaign(short, "b")
	if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Campaign past its deadline = %v, want ErrNotAcquired and DeadlineExceeded", err)
	}
}

// brokenCandidate: a candidate whose connection is gone stops with an
// error instead of campaigning until its ctx ends.
func (s suite) brokenCandidate(t *testing.T) {
	e := s.electionOn(t, s.h.Broken(t), dlocktest.Name(t))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	_, err := e.Campaign(ctx, "x")
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Campaign on a closed connection = %v (ctx %v), want an error before ctx ends", err, ctx.Err())
	}
}

// badInput: refused before any I/O, with one line.
func (s suite) badInput(t *testing.T) {
	l := s.h.New(t)
	for _, c := range []struct {
		what string
		err  func() error
	}{
		{"nil Locker", func() error { _, err := election.New(nil, "x"); return err }},
		{"empty name", func() error { _, err := election.New(l, ""); return err }},
		{"a name too long", func() error { _, err := election.New(l, strings.Repeat("n", 255)); return err }},
		{"WithHandOver(0)", func() error { _, err := election.New(l, "x", election.WithHandOver(0)); return err }},
		{"a value too large", func() error {
			e, err := election.New(l, dlocktest.Name(t))
			if err != nil {
				return nil
			}
			_, err = e.Campaign(context.Background(), strings.Repeat("v", dlock.MaxRecordValue+1))
			return err
		}},
	} {
		err := c.err()
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line error", c.what, err)
		}
	}
}

// records: the Locker's dlock.Recorder, which elections publish through:
// values round-trip, a record's age counts from its token's first write,
// and a smaller token never overwrites a larger one's record.
func (s suite) records(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t)
	l := s.h.New(t)
	rec, ok := l.(dlock.Recorder)
	if !ok {
		t.Fatalf("%T does not implement dlock.Recorder", l)
	}
	if _, ok, err := rec.Recorded(ctx, name); err != nil || ok {
		t.Fatalf("Recorded of a new name: ok=%v err=%v", ok, err)
	}
	first, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	value := []byte("v1\x00\xff\n")
	if err := rec.Record(ctx, name, first.Token(), value); err != nil {
		t.Fatal(err)
	}
	const pause = 300 * time.Millisecond
	time.Sleep(pause)
	if err := rec.Record(ctx, name, first.Token(), []byte{}); err != nil {
		t.Fatal(err)
	}
	r, ok, err := rec.Recorded(ctx, name)
	if err != nil || !ok || r.Token != first.Token() || len(r.Value) != 0 {
		t.Fatalf("Recorded = %+v, %v, %v; want token %d and an empty value", r, ok, err, first.Token())
	}
	if r.Age < pause-50*time.Millisecond {
		t.Errorf("Age %v after rewriting with the same token, want it counted from the first write, %v ago", r.Age, pause)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.Unlock(ctx) }()
	before := r.Age
	if err := rec.Record(ctx, name, second.Token(), value); err != nil {
		t.Fatal(err)
	}
	r, _, err = rec.Recorded(ctx, name)
	if err != nil || r.Token != second.Token() || string(r.Value) != string(value) {
		t.Fatalf("Recorded = %+v, %v; want token %d and value %q", r, err, second.Token(), value)
	}
	if r.Age >= before {
		t.Errorf("Age %v after a new token wrote, want it counted anew (it was %v)", r.Age, before)
	}
	err = rec.Record(ctx, name, first.Token(), []byte("stale"))
	if !errors.Is(err, dlock.ErrStale) {
		t.Fatalf("Record with an older token = %v, want ErrStale", err)
	}
	if r, _, _ := rec.Recorded(ctx, name); string(r.Value) != string(value) || r.Token != second.Token() {
		t.Fatalf("a refused write changed the record: %+v", r)
	}
	for what, err := range map[string]error{
		"token 0":           rec.Record(ctx, name, 0, nil),
		"a value too large": rec.Record(ctx, name, second.Token(), make([]byte, dlock.MaxRecordValue+1)),
		"an invalid name":   rec.Record(ctx, "", second.Token(), nil),
	} {
		if err == nil {
			t.Errorf("Record with %s succeeded", what)
		}
	}
}
