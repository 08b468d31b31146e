// Package schedlocktest is the suite every backend's Locker passes to
// lock scheduled jobs (package schedlock), as dlocktest is for its locks.
// A backend's tests call Run with a Harness that makes Lockers on a real
// server:
//
//	func TestSchedlock(t *testing.T) {
//		schedlocktest.Run(t, schedlocktest.Harness{
//			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { … },
//		})
//	}
//
// One subtest (KilledNode) runs the test again in a child process and
// kills it (SIGKILL) in the middle of a run: the test binary must be able
// to run its own tests again, which go test's binaries can.
package schedlocktest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/subproc"
	"github.com/dlockhq/dlock/schedlock"
)

// Harness tells Run how to make Lockers of the backend under test.
type Harness struct {
	// New returns a new Locker with opts applied, on the backend's
	// servers: a node each. New registers its cleanup with t.
	New func(t *testing.T, opts ...dlock.Option) dlock.Locker
	// TTL is the lease of the nodes: a node that dies frees its job's
	// slot this long after its last renewal. Default 1s.
	TTL time.Duration
	// OwnServers says that New's servers belong to this process (started
	// by the test, or in memory): a child process would have its own, so
	// the subtest that needs one (KilledNode) is not run.
	OwnServers bool
}

// Nodes is how many nodes run each job on the same schedule.
const Nodes = 5

// Slots is how many slots ExactlyOncePerSlot runs; DLOCK_SCHEDLOCK_SLOTS
// overrides it.
const Slots = 50

// Run runs the suite.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("schedlocktest: Harness.New is nil")
	}
	if h.TTL <= 0 {
		h.TTL = time.Second
	}
	s := suite{h}
	if os.Getenv(childEnv) != "" {
		t.Run("KilledNode", s.killedNode)
		return
	}
	t.Run("ExactlyOncePerSlot", s.exactlyOncePerSlot)
	if !h.OwnServers {
		t.Run("KilledNode", s.killedNode)
	}
	t.Run("LockAtLeastFor", s.lockAtLeastFor)
	t.Run("SkipWhileRunning", s.skipWhileRunning)
	t.Run("Wait", s.wait)
	t.Run("TokenAndAssert", s.tokenAndAssert)
	t.Run("LostLease", s.lostLease)
	t.Run("LockAtMostFor", s.lockAtMostFor)
	t.Run("BadInput", s.badInput)
}

type suite struct{ h Harness }

func (s suite) runner(t *testing.T, opts ...schedlock.Option) *schedlock.Runner {
	t.Helper()
	return s.runnerOn(t, s.h.New(t, dlock.WithTTL(s.h.TTL)), opts...)
}

func (s suite) runnerOn(t *testing.T, l dlock.Locker, opts ...schedlock.Option) *schedlock.Runner {
	t.Helper()
	r, err := schedlock.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// schedule is Nodes nodes firing one job every period from start, node i
// shifted by i*period/16 (up to period/4), with lockAtLeastFor 5/8 of the
// period: a node may run late by up to 3/8 of the period (a slow server,
// a busy machine) before its run is the next slot's (see runs.check).
type schedule struct {
	name   string
	start  time.Time
	period time.Duration
	slots  int
}

func (sc schedule) fire(node, slot int) time.Time {
	return sc.start.Add(time.Duration(slot)*sc.period + time.Duration(node)*sc.period/16)
}

// node runs the schedule's slots on r as node; ran is called with each
// slot it ran, as the run's work, and when the node called Run for it.
func (sc schedule) node(ctx context.Context, r *schedlock.Runner, atMost time.Duration, node int, ran func(slot int, called time.Time)) error {
	for slot := range sc.slots {
		select {
		case <-time.After(time.Until(sc.fire(node, slot))):
		case <-ctx.Done():
			return ctx.Err()
		}
		called := time.Now()
		err := r.Run(ctx, sc.name, func(context.Context, uint64) error {
			ran(slot, called)
			return nil
		}, atMost, atLeastFor(sc.period))
		if err != nil && !errors.Is(err, schedlock.ErrSkipped) {
			return fmt.Errorf("node %d, slot %d: %w", node, slot, err)
		}
	}
	return nil
}

// atLeastFor is the schedule's lockAtLeastFor.
func atLeastFor(period time.Duration) time.Duration { return 5 * period / 8 }

func slots() int {
	if n, err := strconv.Atoi(os.Getenv("DLOCK_SCHEDLOCK_SLOTS")); err == nil && n > 0 {
		return n
	}
	return Slots
}

// runs counts the runs of each slot.
type runs struct {
	mu sync.Mutex
	n  map[int][]run
}

// run is one run of a slot: by whom, when its node called Run and when
// the job ran (zero when a child process reported it).
type run struct {
	by          string
	called, ran time.Time
}

func (r *runs) add(slot int, by string, called, ran time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[int][]run{}
	}
	r.n[slot] = append(r.n[slot], run{by, called, ran})
}

// check fails t unless each of the slots ran once. The lock tells slots
// apart only by time: a node so late for slot N that its job ran
// lockAtLeastFor after the slot's first run was called took the lock
// lawfully, and from the lock's view it ran slot N+1 (whose nodes, on
// time, then found the slot taken). check counts such a run for N+1, and
// logs it. Likewise a slot that nobody ran because slot N-1's run came so
// late (the machine stalled) that its lockAtLeastFor lawfully covered
// slot N's start is logged, not failed. A run sooner than that beside
// another of its slot, or a slot missed with the lock free, is the lock
// failing. start is when each slot begins.
func (r *runs) check(t *testing.T, slots int, atLeast time.Duration, start func(slot int) time.Time) {
	t.Helper()
	bad, late := r.miscounted(slots, atLeast, start)
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("%d slots, %d ran other than once, %d runs so late they ran or held over the next slot", slots, len(bad), late)
}

// miscounted returns a line for each slot that did not run once, after
// counting runs that were late by lockAtLeastFor for the next slot (see
// check), and how many runs were late so (or held a slot over). A run
// is judged late against the first call of its own slot only, and moves
// at most once: a run moved into a slot neither sets that slot's first
// call nor moves on, so one slow acquisition cannot push every later
// slot's runs forward.
func (r *runs) miscounted(slots int, atLeast time.Duration, start func(slot int) time.Time) (bad []string, late int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	counted := make(map[int][]run, slots+1)
	for slot := range slots {
		own := r.n[slot]
		var first *run
		for i := range own {
			if c := &own[i]; !c.called.IsZero() && (first == nil || c.called.Before(first.called)) {
				first = c
			}
		}
		for _, c := range own {
			if first != nil && !c.ran.IsZero() && c.ran.Sub(first.called) >= atLeast {
				late++
				c.by += fmt.Sprintf(", late for slot %d by %v", slot, c.ran.Sub(first.called).Round(time.Millisecond))
				counted[slot+1] = append(counted[slot+1], c)
				continue
			}
			counted[slot] = append(counted[slot], c)
		}
	}
	for slot := range slots {
		by := counted[slot]
		if len(by) == 0 && slot > 0 {
			var last time.Time
			for _, c := range counted[slot-1] {
				if c.ran.After(last) {
					last = c.ran
				}
			}
			if !last.IsZero() && last.Add(atLeast).After(start(slot)) {
				late++ // held over by slot-1's late run
				continue
			}
		}
		if len(by) != 1 {
			bad = append(bad, fmt.Sprintf("slot %d ran %d times (%v; slot %d: %v), want once", slot, len(by), by, slot-1, counted[slot-1]))
		}
	}
	return bad, late
}

// exactlyOncePerSlot: Nodes nodes whose schedules are shifted by up to a
// quarter of the period run a fast job exactly once per slot.
func (s suite) exactlyOncePerSlot(t *testing.T) {
	const period = 400 * time.Millisecond
	sc := schedule{name: dlocktest.Name(t), start: time.Now().Add(period), period: period, slots: slots()}
	ctx := ctxT(t, time.Duration(sc.slots+4)*period+dlocktest.Timeout)
	var got runs
	s.nodes(t, ctx, sc, 0, &got).Wait()
	got.check(t, sc.slots, atLeastFor(sc.period), sc.slotStart)
}

// slotStart is when slot begins: node 0's time for it.
func (sc schedule) slotStart(slot int) time.Time { return sc.fire(0, slot) }

// nodes starts nodes first to Nodes-1 of sc on Lockers of their own,
// each adding the slots it ran to got; wait for them on the WaitGroup.
func (s suite) nodes(t *testing.T, ctx context.Context, sc schedule, first int, got *runs) *sync.WaitGroup {
	var wg sync.WaitGroup
	for node := first; node < Nodes; node++ {
		r := s.runner(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sc.node(ctx, r, max(s.h.TTL, sc.period), node, func(slot int, called time.Time) {
				ran := time.Now()
				got.add(slot, fmt.Sprintf("node %d, ran %v after its time", node, ran.Sub(sc.fire(node, slot)).Round(time.Millisecond)), called, ran)
			}); err != nil {
				t.Error(err)
			}
		}()
	}
	return &wg
}

// The child process of killedNode.
const (
	childEnv    = "DLOCK_SCHEDLOCKTEST_CHILD" // name,start(unix ns),period,slots
	childPrefix = "schedlocktest: "
	killedSlot  = 2 // the child hangs in its first run from this slot on
)

// killedNode: one of the nodes, in a child process, is killed (SIGKILL)
// in the middle of a run; every slot still runs exactly once: the killed
// run counts, and the slot frees within the TTL, before the next slot.
func (s suite) killedNode(t *testing.T) {
	if env := os.Getenv(childEnv); env != "" {
		s.killedChild(t, env)
		return
	}
	period := 5 * s.h.TTL / 2
	sc := schedule{name: dlocktest.Name(t), start: time.Now().Add(2 * time.Second), period: period, slots: 8}
	ctx := ctxT(t, time.Duration(sc.slots+4)*period+dlocktest.Timeout)
	child := subproc.Start(t, childPrefix, fmt.Sprintf("%s=%s,%d,%d,%d", childEnv, sc.name, sc.start.UnixNano(), period, sc.slots))
	var got runs
	wg := s.nodes(t, ctx, sc, 1, &got) // node 0, the earliest, is the child
	killed := false
	for line := range child.Lines() {
		var slot int
		if _, err := fmt.Sscanf(line, "ran %d", &slot); err == nil {
			got.add(slot, "child", time.Time{}, time.Time{})
		}
		if _, err := fmt.Sscanf(line, "hangs in %d", &slot); err == nil {
			got.add(slot, "child, killed", time.Time{}, time.Time{})
			child.Kill(t)
			killed = true
		}
	}
	wg.Wait()
	if !killed {
		t.Fatal("the child never ran a slot to be killed in")
	}
	got.check(t, sc.slots, atLeastFor(sc.period), sc.slotStart)
}

// killedChild is killedNode's node 0: it runs the schedule and hangs in
// its first run from killedSlot on, until killed.
func (s suite) killedChild(t *testing.T, env string) {
	parts := strings.Split(env, ",")
	start, _ := strconv.ParseInt(parts[1], 10, 64)
	period, _ := strconv.ParseInt(parts[2], 10, 64)
	n, _ := strconv.Atoi(parts[3])
	sc := schedule{name: parts[0], start: time.Unix(0, start), period: time.Duration(period), slots: n}
	ctx := ctxT(t, time.Duration(sc.slots+4)*sc.period+dlocktest.Timeout)
	err := sc.node(ctx, s.runner(t), max(s.h.TTL, sc.period), 0, func(slot int, _ time.Time) {
		if slot >= killedSlot {
			subproc.Say(childPrefix, "hangs in %d", slot)
			<-ctx.Done()
			return
		}
		subproc.Say(childPrefix, "ran %d", slot)
	})
	subproc.Say(childPrefix, "ended: %v", err)
}

// lockAtLeastFor: after a fast run, the slot stays closed for
// lockAtLeastFor, on every node; then it opens.
func (s suite) lockAtLeastFor(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t, dlocktest.Timeout)
	a, b := s.runner(t), s.runner(t)
	const atLeast = 700 * time.Millisecond
	atMost := max(s.h.TTL, atLeast)
	ran := 0
	job := func(context.Context, uint64) error { ran++; return nil }
	began := time.Now()
	if err := a.Run(ctx, name, job, atMost, atLeast); err != nil {
		t.Fatal(err)
	}
	err := b.Run(ctx, name, job, atMost, atLeast)
	if !errors.Is(err, schedlock.ErrSkipped) {
		if time.Since(began) < atLeast-100*time.Millisecond {
			t.Fatalf("a second node's Run %v after the first = %v, want ErrSkipped", time.Since(began), err)
		}
		t.Skipf("the machine took %v between the runs, longer than lockAtLeastFor", time.Since(began))
	}
	dlocktest.Eventually(t, func() bool {
		err := b.Run(ctx, name, job, atMost, atLeast)
		if err != nil && !errors.Is(err, schedlock.ErrSkipped) {
			t.Fatal(err)
		}
		return err == nil
	}, "the slot to open after lockAtLeastFor")
	if waited := time.Since(began); waited < atLeast-100*time.Millisecond {
		t.Errorf("the slot opened %v after the run began, before lockAtLeastFor (%v)", waited, atLeast)
	}
	if ran != 2 {
		t.Errorf("%d runs, want 2", ran)
	}
}

// skipWhileRunning: a node whose job is running holds the slot; another
// node's Run skips at once.
func (s suite) skipWhileRunning(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t, dlocktest.Timeout)
	a, b := s.runner(t), s.runner(t)
	running, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, name, func(context.Context, uint64) error {
			close(running)
			<-release
			return nil
		}, s.h.TTL, 0)
	}()
	<-running
	err := b.Run(ctx, name, func(context.Context, uint64) error {
		t.Error("a second node ran the job while the first ran it")
		return nil
	}, s.h.TTL, 0)
	if !errors.Is(err, schedlock.ErrSkipped) || strings.Contains(err.Error(), "\n") {
		t.Errorf("Run while another node runs the job = %v, want a one-line ErrSkipped", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// wait: WithWait waits for the running job and the slot's
// lockAtLeastFor, then runs.
func (s suite) wait(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t, dlocktest.Timeout)
	a, b := s.runner(t), s.runner(t, schedlock.WithWait())
	const atLeast = 500 * time.Millisecond
	atMost := max(s.h.TTL, atLeast)
	var aBegan, aEnded time.Time
	running := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, name, func(context.Context, uint64) error {
			aBegan = time.Now()
			close(running)
			time.Sleep(200 * time.Millisecond)
			aEnded = time.Now()
			return nil
		}, atMost, atLeast)
	}()
	<-running
	var bBegan time.Time
	if err := b.Run(ctx, name, func(context.Context, uint64) error { bBegan = time.Now(); return nil }, atMost, atLeast); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if bBegan.Before(aEnded) || bBegan.Sub(aBegan) < atLeast-100*time.Millisecond {
		t.Errorf("the waiting node ran %v after the first began (%v after it ended), want after it and lockAtLeastFor (%v)", bBegan.Sub(aBegan), bBegan.Sub(aEnded), atLeast)
	}
}

// tokenAndAssert: the job gets the run's fencing token, larger on each
// run; Assert accepts the run's ctx while the run lasts, nothing else.
func (s suite) tokenAndAssert(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t, dlocktest.Timeout)
	r := s.runner(t)
	var last uint64
	var kept context.Context
	for range 2 {
		err := r.Run(ctx, name, func(ctx context.Context, token uint64) error {
			if token <= last {
				t.Errorf("token %d after %d", token, last)
			}
			last, kept = token, ctx
			return schedlock.Assert(ctx)
		}, s.h.TTL, 0)
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := schedlock.Assert(ctx); !errors.Is(err, schedlock.ErrNotInRun) {
		t.Errorf("Assert outside a run = %v, want ErrNotInRun", err)
	}
	if err := schedlock.Assert(kept); !errors.Is(err, schedlock.ErrNotInRun) {
		t.Errorf("Assert with a finished run's ctx = %v, want ErrNotInRun", err)
	}
	boom := errors.New("the job failed")
	if err := r.Run(ctx, name, func(context.Context, uint64) error { return boom }, s.h.TTL, 0); !errors.Is(err, boom) {
		t.Errorf("Run of a failing job = %v, want its error", err)
	}
}

// lostLease: a run whose lease is lost has its ctx cancelled before
// another node can run the job, and Run reports the loss.
func (s suite) lostLease(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t, dlocktest.Timeout)
	a := s.runnerOn(t, s.h.New(t, dlock.WithTTL(s.h.TTL), dlock.WithoutAutoRenew()))
	b := s.runner(t, schedlock.WithWait())
	jobCtx := make(chan context.Context, 1)
	done := make(chan error, 1)
	go func() {
		done <- a.Run(ctx, name, func(ctx context.Context, _ uint64) error {
			jobCtx <- ctx
			<-ctx.Done()
			return nil
		}, 10*s.h.TTL, 0)
	}()
	first := <-jobCtx
	err := b.Run(ctx, name, func(context.Context, uint64) error {
		if first.Err() == nil {
			t.Error("another node ran the job while the lost run's ctx was live")
		}
		return nil
	}, 10*s.h.TTL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, dlock.ErrLost) {
		t.Errorf("Run whose lease was lost = %v, want dlock.ErrLost", err)
	}
	if cause := context.Cause(first); !errors.Is(cause, dlock.ErrLost) {
		t.Errorf("the lost run's ctx cause = %v, want dlock.ErrLost", cause)
	}
}

// lockAtMostFor: the run's ctx ends at lockAtMostFor.
func (s suite) lockAtMostFor(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t, dlocktest.Timeout)
	r := s.runner(t)
	began := time.Now()
	var cause error
	err := r.Run(ctx, name, func(ctx context.Context, _ uint64) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return nil
	}, s.h.TTL, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(cause, schedlock.ErrLockAtMostFor) || time.Since(began) < s.h.TTL {
		t.Errorf("run ended after %v with cause %v, want ErrLockAtMostFor after %v", time.Since(began), cause, s.h.TTL)
	}
}

// badInput: refused with one line before any I/O, leaving the job's lock
// free.
func (s suite) badInput(t *testing.T) {
	name := dlocktest.Name(t)
	ctx := ctxT(t, dlocktest.Timeout)
	l := s.h.New(t, dlock.WithTTL(s.h.TTL))
	r := s.runnerOn(t, l)
	job := func(context.Context, uint64) error { t.Error("a job ran with bad arguments"); return nil }
	for what, err := range map[string]error{
		"nil Locker":                     func() error { _, err := schedlock.New(nil); return err }(),
		"nil Job":                        r.Run(ctx, name, nil, s.h.TTL, 0),
		"empty name":                     r.Run(ctx, "", job, s.h.TTL, 0),
		"lockAtMostFor 0":                r.Run(ctx, name, job, 0, 0),
		"lockAtLeastFor > lockAtMostFor": r.Run(ctx, name, job, s.h.TTL, 2*s.h.TTL),
		"lockAtLeastFor < 0":             r.Run(ctx, name, job, s.h.TTL, -1),
		"lockAtMostFor < the TTL":        r.Run(ctx, name, job, s.h.TTL/2, 0),
	} {
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line error", what, err)
		}
	}
	lease, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("the job's lock after refused runs: %v", err)
	}
	_ = lease.Unlock(ctx)
}
