package redislock_test

import (
	"testing"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/election/electiontest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func TestElection(t *testing.T) {
	addr := testenv.RedisAddr(t)
	for _, tc := range lockerKinds {
		t.Run(tc.name, func(t *testing.T) {
			electiontest.Run(t, electiontest.Harness{
				New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
					return tc.make(t, client(t, addr), opts...)
				},
				Broken: func(t *testing.T) dlock.Locker { return broken(t, addr, redislock.New) },
			})
		})
	}
}
