package dlock

import (
	"sync/atomic"
	"testing"
	"time"
)

// countedWorkers counts the goroutines w starts and those still running.
func countedWorkers(quit <-chan struct{}) (w *workers, started, running *atomic.Int32) {
	w = newWorkers(quit)
	started, running = new(atomic.Int32), new(atomic.Int32)
	w.spawn = func(f func()) {
		started.Add(1)
		running.Add(1)
		go func() {
			defer running.Add(-1)
			w.work(f)
		}()
	}
	return w, started, running
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Calls one after another run on the goroutine of the first, and a call
// that blocks does not hold up the next.
func TestWorkersReuseGoroutines(t *testing.T) {
	quit := make(chan struct{})
	defer close(quit)
	w, started, _ := countedWorkers(quit)
	for range 50 {
		done := make(chan struct{})
		w.run(func() { close(done) })
		<-done
		time.Sleep(5 * time.Millisecond) // the worker is idle again (or slow: see below)
	}
	// Without reuse, every call starts one; a loaded machine may keep a
	// worker from its wait past the next call now and then.
	if n := started.Load(); n > 25 {
		t.Fatalf("50 calls one after another started %d goroutines, want the first one reused", n)
	}

	blocked, ran := make(chan struct{}), make(chan struct{})
	w.run(func() { <-blocked })
	w.run(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("a call waited behind a blocked one")
	}
	close(blocked)
}

// Idle workers exit after workerIdle, and at once when quit closes; a call
// made after quit still runs.
func TestWorkersExit(t *testing.T) {
	quit := make(chan struct{})
	w, _, running := countedWorkers(quit)
	w.run(func() {})
	waitFor(t, "the idle worker to exit after workerIdle", func() bool { return running.Load() == 0 })

	w.idle = time.Hour // from here on, only quit ends a worker
	release := make(chan struct{})
	for range 3 {
		w.run(func() { <-release })
	}
	close(release)
	close(quit)
	waitFor(t, "the workers to exit at quit", func() bool { return running.Load() == 0 })

	ran := make(chan struct{})
	w.run(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("a call made after quit did not run")
	}
}
