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

// A read-write lock's write side, and Redlock (its records on a quorum),
// hold elections too.
func TestElectionOtherLockers(t *testing.T) {
	addr := testenv.RedisAddr(t)
	t.Run("ReadWrite", func(t *testing.T) {
		electiontest.Run(t, electiontest.Harness{
			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
				rw, err := redislock.NewReadWrite(client(t, addr), opts...)
				if err != nil {
					t.Fatal(err)
				}
				testenv.Closing(t, rw.Read)
				return testenv.Closing(t, rw.Write)
			},
		})
	})
	t.Run("Redlock", func(t *testing.T) {
		servers := testenv.RedisServers(t, 3)
		electiontest.Run(t, electiontest.Harness{
			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
				return redlockOver(t, servers, opts...)
			},
			OwnServers: true,
		})
	})
}
