package zklock_test

import (
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/election/electiontest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func TestElection(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	const session = 4 * time.Second
	electiontest.Run(t, electiontest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			conn := testenv.ZK(t, addrs, session)
			return newLocker(t, conn, append([]dlock.Option{dlock.WithTTL(session)}, opts...)...)
		},
		Broken: func(t *testing.T) dlock.Locker {
			conn := testenv.ZK(t, addrs, session)
			l := newLocker(t, conn)
			conn.Close()
			return l
		},
		TTL: session,
	})
}
