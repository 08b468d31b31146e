// The call machinery: every backend call of a Client runs here, within
// its caller's ctx. It knows nothing of holds: an outcome that comes too
// late for its caller goes to a callback, which gives back what it
// granted.

package dlock

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// caller runs a Client's backend calls, on the caller's goroutine where
// the backend keeps ctx, and otherwise on a worker the caller can leave
// behind when ctx ends.
type caller struct {
	backend driver.Backend
	workers *workers
	// track counts a call that Close waits for, and returns what ends it.
	track func() (done func())
}

// bounded reports whether the backend's calls keep their ctx's deadline
// (driver.DeadlineBound): a request detached from its caller's
// cancellation and given a deadline of its own may then run on the
// caller's goroutine (see releaseInline).
func (cl *caller) bounded() bool {
	b, ok := cl.backend.(driver.DeadlineBound)
	return ok && b.BoundsCalls()
}

// inline reports whether a call with ctx may run on its caller's
// goroutine: the backend's calls keep their ctx's deadline
// (driver.DeadlineBound) and also end at its cancellation
// (driver.CancelBound), or ctx cannot be cancelled before a deadline
// that is at most CancelMargin away.
func (cl *caller) inline(ctx context.Context) bool {
	if !cl.bounded() {
		return false
	}
	if cb, ok := cl.backend.(driver.CancelBound); ok && cb.EndsOnCancel() {
		return true
	}
	if ctx.Done() == nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && time.Until(d) <= CancelMargin
}

// within runs f, one backend call, within ctx and returns its outcome:
// on the caller's goroutine when inline (see caller.inline), and otherwise
// on a worker. Then, when ctx ends before f returns, within waits up to
// margin more (a backend that honours ctx ends its call within moments)
// and returns ctx's error with pending true: late, unless nil, gets f's
// outcome when it comes, on f's goroutine. A call on the caller's
// goroutine is never pending.
func within[T any](cl *caller, ctx context.Context, inline bool, margin time.Duration, f func(context.Context) (T, error), late func(T, error)) (_ T, _ error, pending bool) {
	if inline {
		done := cl.track()
		defer done()
		t, err := f(ctx)
		return t, err, false
	}
	const (
		running = iota
		finished
		left
	)
	var (
		state atomic.Int32
		ready = make(chan struct{})
		t     T
		err   error
	)
	// Whoever of the call and its caller moves state first decides who
	// owns the outcome: the caller, or (when it left) late.
	done := cl.track()
	cl.workers.run(func() {
		defer done()
		t, err = f(ctx)
		if !state.CompareAndSwap(running, finished) {
			if late != nil {
				late(t, err)
			}
			return
		}
		close(ready)
	})
	select {
	case <-ready:
		return t, err, false
	case <-ctx.Done():
	}
	if margin > 0 {
		timer := time.NewTimer(margin)
		defer timer.Stop()
		select {
		case <-ready:
			return t, err, false
		case <-timer.C:
		}
	}
	if state.CompareAndSwap(running, left) {
		var zero T
		return zero, ctx.Err(), true
	}
	<-ready
	return t, err, false
}

// read is do for a call whose outcome does not matter once its caller
// has left (a read): it returns when ctx ends, at once.
func read[T any](cl *caller, ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	t, err, _ := within(cl, ctx, cl.inline(ctx), 0, f, nil)
	return t, err
}

// workerIdle is how long a worker waits for its next call before it exits:
// long enough to serve a busy Client's next calls, short enough that a
// Client left open (or dropped) leaves no goroutine behind for long.
const workerIdle = 100 * time.Millisecond

// workers runs a Client's calls that may outlast their callers, each on a
// goroutine of its own. A goroutine that has finished one call waits a
// moment for the next instead of exiting: a new goroutine starts with a
// small stack and grows it, by copying, to a driver's call depth, which
// cost about a sixth of the CPU time of an uncontended Redis lock and
// unlock.
//
// Idle workers exit after workerIdle, or at once when quit closes (Close).
type workers struct {
	tasks chan func() // unbuffered: a send succeeds only to an idle worker
	quit  <-chan struct{}
	idle  time.Duration  // workerIdle; tests set others
	spawn func(f func()) // starts a worker with f; tests count them
}

func newWorkers(quit <-chan struct{}) *workers {
	w := &workers{tasks: make(chan func()), quit: quit, idle: workerIdle}
	w.spawn = func(f func()) { go w.work(f) }
	return w
}

// run runs f on an idle worker, or on a new one when none is idle.
func (w *workers) run(f func()) {
	select {
	case w.tasks <- f:
	default:
		w.spawn(f)
	}
}

func (w *workers) work(f func()) {
	idle := time.NewTimer(w.idle)
	defer idle.Stop()
	for {
		f()
		f = nil // nothing of the finished call stays reachable
		idle.Reset(w.idle)
		select {
		case f = <-w.tasks:
		case <-idle.C:
			return
		case <-w.quit:
			return
		}
	}
}
