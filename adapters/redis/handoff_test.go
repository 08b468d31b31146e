package redislock_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
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

// Call chains that waited for another process's hold hand the lock on to
// each other once it comes to them, the plain lock and the fair one.
func TestHandOffAfterWaiting(t *testing.T) {
	addr := testenv.RedisAddr(t)
	for kind, mk := range map[string]lockerMaker{"lock": newLocker, "fair": newFair} {
		t.Run(kind, func(t *testing.T) {
			c := client(t, addr)
			testenv.CheckHandsOnAfterWaiting(t, mk(t, c), mk(t, client(t, addr)), countCommands(c))
		})
	}
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
	addr := testenv.RedisAddr(t)
	admin, c := client(t, addr), client(t, addr)
	sent := countCommands(c)
	testenv.HandOffYields(t, newFair(t, c), newFair(t, client(t, addr)),
		func(name string) bool { return admin.LLen(context.Background(), "dlock:{"+name+"}:queue").Val() == 1 },
		func() int64 { n, _ := sent(context.Background()); return n }, 2)
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
