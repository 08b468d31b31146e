package redislock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Call chains sharing a Locker hand the lock on to each other in one
// script per hold, with increasing tokens; with hand-offs off a hold
// costs an acquire and a release.
func TestHandOff(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	sent := countCommands(c)
	testenv.CheckHandsOn(t, func(opts ...dlock.Option) dlock.Locker { return newLocker(t, c, opts...) }, sent, 2)
}

// A process whose goroutines pass the lock from one to the next lets
// another process in at the hand-off limit: the release wakes it.
func TestHandOffLetsAnotherProcessIn(t *testing.T) {
	addr := testenv.RedisAddr(t)
	testenv.LetsAnotherIn(t, newLocker(t, client(t, addr)), newLocker(t, client(t, addr)))
}

// The fair lock hands on in the process too while no other process
// waits: one script per hold; with hand-offs off, an acquire and a
// release.
func TestFairHandOff(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	sent := countCommands(c)
	testenv.CheckHandsOn(t, func(opts ...dlock.Option) dlock.Locker { return newFair(t, c, opts...) }, sent, 2)
}

// When another process is queued on the server, a fair hold that ends
// does not pass to the next goroutine of its own Locker: the release
// grants the lock to the queued process first, in the server's order.
func TestFairHandOffYieldsToQueuedProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	addr := testenv.RedisAddr(t)
	admin := client(t, addr)
	c := client(t, addr)
	sent := countCommands(c)
	a, b := newFair(t, c), newFair(t, client(t, addr))
	name := dlocktest.Name(t)

	first, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease dlock.Lease
		err   error
	}
	lock := func(l dlock.Locker) <-chan result {
		got := make(chan result, 1)
		go func() {
			lease, err := l.Lock(ctx, name)
			got <- result{lease, err}
		}()
		return got
	}
	other := lock(b)
	dlocktest.Eventually(t, func() bool { return admin.LLen(ctx, "dlock:{"+name+"}:queue").Val() == 1 }, "the other process queued")
	next := lock(a)
	// next waits in a's process, not on the server; give it the moment it
	// takes to get there.
	time.Sleep(100 * time.Millisecond)

	before, _ := sent(ctx)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-other
	if r.err != nil {
		t.Fatal(r.err)
	}
	if after, _ := sent(ctx); after-before < 2 {
		t.Errorf("%d requests at the Unlock, want a hand-off tried and a release", after-before)
	}
	select {
	case n := <-next:
		t.Fatalf("the next goroutine of the releasing process got the lock (%v) ahead of the queued process", n.err)
	default:
	}
	if r.lease.Token() <= first.Token() {
		t.Errorf("the queued process's token %d after the holder's %d", r.lease.Token(), first.Token())
	}
	if err := r.lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	n := <-next
	if n.err != nil {
		t.Fatal(n.err)
	}
	if n.lease.Token() <= r.lease.Token() {
		t.Errorf("the next goroutine's token %d after the queued process's %d", n.lease.Token(), r.lease.Token())
	}
	if err := n.lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// countCommands counts the commands c sends from now on, pipelined or not
// (a pipeline of a script and its WAIT counts two).
func countCommands(c *redis.Client) func(context.Context) (int64, error) {
	h := &commandCounter{}
	c.AddHook(h)
	return func(context.Context) (int64, error) { return h.n.Load(), nil }
}

type commandCounter struct{ n atomic.Int64 }

func (*commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
