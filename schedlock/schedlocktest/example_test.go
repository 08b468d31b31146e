package schedlocktest_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
)

// A backend's scheduled-job test: each node gets a Locker of its own, as
// separate processes would.
func ExampleRun() {
	schedlocks := func(t *testing.T) {
		schedlocktest.Run(t, schedlocktest.Harness{
			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
				c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
				l, err := redislock.New(c, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					l.Close(context.Background())
					c.Close()
				})
				return l
			},
		})
	}
	_ = schedlocks // func TestSchedlock(t *testing.T) { schedlocks(t) }
}
