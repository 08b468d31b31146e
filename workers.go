package dlock

import "time"

// workerIdle is how long a worker waits for its next call before it exits:
// long enough to serve a busy Client's next calls, short enough that a
// Client left open (or dropped) leaves no goroutine behind for long.
const workerIdle = 100 * time.Millisecond

// workers runs a Client's backend calls, each of which runs on a goroutine
// of its own so that its caller can return by its ctx (see call and
// withinCtx). A goroutine that has finished one call waits a moment for
// the next instead of exiting: a new goroutine starts with a small stack
// and grows it, by copying, to a driver's call depth, which cost about a
// sixth of the CPU time of an uncontended Redis lock and unlock.
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
