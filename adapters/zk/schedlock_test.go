package zklock_test

import (
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
)

func TestSchedlock(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	const session = time.Second
	schedlocktest.Run(t, schedlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			// Each node has its own session, as separate processes would.
			return newLocker(t, testenv.ZK(t, addrs, session), append([]dlock.Option{dlock.WithTTL(session)}, opts...)...)
		},
		TTL: session,
	})
}
