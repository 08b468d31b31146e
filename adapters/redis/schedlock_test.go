package redislock_test

import (
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
)

func TestSchedlock(t *testing.T) {
	addr := testenv.RedisAddr(t)
	schedlocktest.Run(t, schedlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			return newLocker(t, client(t, addr), opts...)
		},
	})
}
