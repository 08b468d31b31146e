package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Redisson's testInterruptedLock: a waiter whose Lock is cancelled, as
// the holder releases or not, holds nothing afterwards, on every lock
// kind: a third owner gets the name once the holder is gone.
func TestInterruptedLockLeavesNothing(t *testing.T) {
	rounds := 20
	if s := os.Getenv("DLOCK_INTERRUPT_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	addr := testenv.RedisAddr(t)
	kinds := map[string]func(t *testing.T) dlock.Locker{
		"lock":  func(t *testing.T) dlock.Locker { return newLocker(t, client(t, addr)) },
		"fair":  func(t *testing.T) dlock.Locker { return newFair(t, client(t, addr)) },
		"write": func(t *testing.T) dlock.Locker { return newRW(t, addr).Write },
		"read":  func(t *testing.T) dlock.Locker { return newRW(t, addr).Read },
	}
	for kind, mk := range kinds {
		t.Run(kind, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			holderKind := mk
			if kind == "read" {
				rw := newRW(t, addr)
				holderKind = func(*testing.T) dlock.Locker { return rw.Write }
				mk = func(*testing.T) dlock.Locker { return rw.Read }
			}
			for round := range rounds {
				name := dlocktest.Name(t)
				holder, waiter, third := holderKind(t), mk(t), holderKind(t)
				if round%2 == 1 && kind != "read" {
					waiter = holder // two goroutines of one process
				}
				lease, err := holder.Lock(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				// The waiter gives up at about the moment the holder
				// releases: before, at, or just after the grant.
				wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
				time.AfterFunc(time.Duration(30+round%40)*time.Millisecond, func() { _ = lease.Unlock(ctx) })
				got, err := waiter.Lock(wctx, name)
				wcancel()
				if err == nil {
					if err := got.Unlock(ctx); err != nil {
						t.Fatal(err)
					}
				} else if !errors.Is(err, dlock.ErrNotAcquired) {
					t.Fatalf("round %d: waiter: %v", round, err)
				}
				<-lease.Done()
				// What the cancelled waiter may have been granted is
				// given back within moments, never left for a TTL.
				tctx, tcancel := context.WithTimeout(ctx, 2*time.Second)
				l, err := third.Lock(tctx, name)
				tcancel()
				if err != nil {
					t.Fatalf("round %d: a third owner could not lock after the waiter gave up: %v", round, err)
				}
				if err := l.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// Redisson's testLockIsNotRenewedAfterInterruptedTryLock, for every lock
// kind: the attempt reaches the server and is granted there, but its
// reply is held until the caller's ctx has ended. The caller gets
// ErrNotAcquired, so what the server granted must be given back: within
// moments, only the name's fence counter is left.
func TestInterruptedInFlightGrantLeavesNothing(t *testing.T) {
	addr := testenv.RedisAddr(t)
	c := client(t, addr)
	kinds := []string{"lock", "fair", "write", "read"}
	for _, kind := range kinds {
		for _, try := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/try=%v", kind, try), func(t *testing.T) {
				p := testenv.NewProxy(t, addr)
				var l dlock.Locker
				switch kind {
				case "lock":
					l = newLocker(t, client(t, p.Addr()))
				case "fair":
					l = newFair(t, client(t, p.Addr()))
				case "write":
					l = newRW(t, p.Addr()).Write
				case "read":
					l = newRW(t, p.Addr()).Read
				}
				ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
				defer cancel()
				name := dlocktest.Name(t)
				warm, err := l.Lock(ctx, name+".warm") // the pool has its connection
				if err != nil {
					t.Fatal(err)
				}
				if err := warm.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				p.HoldReplies()
				actx, acancel := context.WithTimeout(ctx, 50*time.Millisecond)
				if try {
					_, err = l.TryLock(actx, name)
				} else {
					_, err = l.Lock(actx, name)
				}
				acancel()
				if !errors.Is(err, dlock.ErrNotAcquired) {
					t.Fatalf("attempt whose reply was held: %v, want ErrNotAcquired", err)
				}
				p.Restore()
				fence := "dlock:{" + name + "}:fence"
				var left []string
				for range 100 {
					keys, err := c.Keys(ctx, "dlock:{"+name+"}*").Result()
					if err != nil {
						t.Fatal(err)
					}
					left = slices.DeleteFunc(keys, func(k string) bool { return k == fence })
					if len(left) == 0 {
						if c.Exists(ctx, fence).Val() != 1 {
							t.Fatal("the attempt never reached the server: nothing was tested")
						}
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
				t.Fatalf("2 s after an interrupted attempt the server still has %v", left)
			})
		}
	}
}
