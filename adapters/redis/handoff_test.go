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

// A process whose goroutines pass the lock from one to the next lets
// another process in at the hand-off limit: the release wakes it.
func TestHandOffLetsAnotherProcessIn(t *testing.T) {
	addr := testenv.RedisAddr(t)
	testenv.LetsAnotherIn(t, newLocker(t, client(t, addr)), newLocker(t, client(t, addr)))
}

// The fair lock does not hand on in the process: its waiters queue on the
// server, in order, across processes, so each hold is an acquire and a
// release.
func TestFairDoesNotHandOff(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	sent := countCommands(c)
	perHold := testenv.StatementsPerHold(t, newFair(t, c), sent, "fair")
	if perHold < 2 {
		t.Errorf("the fair lock: %.2f requests per hold, want at least 2 (an acquire and a release)", perHold)
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
