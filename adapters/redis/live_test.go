package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// A Lock whose wake-ups are already subscribed (the Locker waited on the
// name moments ago) sends two requests when it has to wait: the attempt
// that misses, and the one after the release. A subscription made after
// the miss would need one more, an attempt right after it. A fair
// waiter sends only the miss: the release grants it the lock and says so.
func TestWaitOnLiveSubscription(t *testing.T) {
	addr := testenv.RedisAddr(t)
	for _, tc := range []struct {
		name string
		make func(redis.UniversalClient, ...dlock.Option) (*redislock.Locker, error)
		want int64
		why  string
	}{
		{"lock", redislock.New, 2, "the miss and the grant"},
		{"fair", redislock.NewFair, 1, "the miss; the release grants"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			name := dlocktest.Name(t)
			locker := func(c redis.UniversalClient) *redislock.Locker {
				l, err := tc.make(c)
				if err != nil {
					t.Fatal(err)
				}
				return testenv.Closing(t, l)
			}
			admin := client(t, addr)
			holder := locker(client(t, addr))
			c := client(t, addr)
			sent := countCommands(c)
			waiter := locker(c)
			held, err := holder.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}

			// A first wait subscribes (a miss, then the attempt right after
			// the subscription) and gives up: nothing is released, so no
			// wake-up is on its way when the counted wait begins.
			start, _ := sent(ctx)
			wctx, giveUp := context.WithCancel(ctx)
			gaveUp := make(chan error, 1)
			go func() {
				_, err := waiter.Lock(wctx, name)
				gaveUp <- err
			}()
			dlocktest.Eventually(t, func() bool { n, _ := sent(ctx); return n >= start+2 }, "the waiter subscribed")
			time.Sleep(50 * time.Millisecond) // the second attempt's reply
			giveUp()
			if err := <-gaveUp; !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("the Lock given up: %v, want ErrNotAcquired", err)
			}
			// The fair waiter leaves the server's queue in the background.
			dlocktest.Eventually(t, func() bool { return admin.LLen(ctx, "dlock:{"+name+"}:queue").Val() == 0 }, "the queue empty")

			before, _ := sent(ctx)
			got := testenv.LockLater(t, ctx, waiter, name)
			// The waiter's miss, then time for a retry to show: the release
			// comes only after it, so a wait that sends anything but the
			// miss before it counts it.
			dlocktest.Eventually(t, func() bool { n, _ := sent(ctx); return n > before }, "the waiter's attempt")
			time.Sleep(200 * time.Millisecond)
			if err := held.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			lease := <-got
			if lease == nil {
				t.FailNow()
			}
			after, _ := sent(ctx)
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if n := after - before; n != tc.want {
				t.Errorf("a wait on a live subscription sent %d requests, want %d (%s)", n, tc.want, tc.why)
			}
		})
	}
}
