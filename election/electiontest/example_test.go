package electiontest_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/election/electiontest"
)

// A backend's election test: each candidate gets a Locker of its own, as
// separate processes would.
func ExampleRun() {
	election := func(t *testing.T) {
		electiontest.Run(t, electiontest.Harness{
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
	_ = election // func TestElection(t *testing.T) { election(t) }
}
