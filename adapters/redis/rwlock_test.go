package redislock_test

import (
	"context"
	"testing"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func newRW(t testing.TB, addr string, opts ...dlock.Option) *redislock.ReadWrite {
	t.Helper()
	rw, err := redislock.NewReadWrite(client(t, addr), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rw.Read.Close(context.Background())
		rw.Write.Close(context.Background())
	})
	return rw
}

// The write side is an exclusive lock and passes the whole suite.
func TestRWWriteConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			return newRW(t, addr, opts...).Write
		},
		Broken: func(t *testing.T) dlock.Locker {
			c := client(t, addr)
			rw, err := redislock.NewReadWrite(c)
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			testenv.Closing(t, rw.Read)
			return testenv.Closing(t, rw.Write)
		},
	})
}

func TestRWConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	dlocktest.RunReadWrite(t, dlocktest.ReadWriteHarness{
		New: func(t *testing.T) (dlock.Locker, dlock.Locker) {
			rw := newRW(t, addr)
			return rw.Read, rw.Write
		},
	})
}
