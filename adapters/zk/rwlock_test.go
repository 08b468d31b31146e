package zklock_test

import (
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func newRW(t *testing.T, opts ...dlock.Option) *zklock.ReadWrite {
	t.Helper()
	conn := testenv.ZK(t, testenv.ZKAddrs(t), 4*time.Second)
	rw, err := zklock.NewReadWrite(conn, root, append([]dlock.Option{dlock.WithTTL(4 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Closing(t, rw.Read)
	testenv.Closing(t, rw.Write)
	return rw
}

func TestRWWriteConformance(t *testing.T) {
	dlocktest.Run(t, dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { return newRW(t, opts...).Write },
		Broken: func(t *testing.T) dlock.Locker {
			conn := testenv.ZK(t, testenv.ZKAddrs(t), 4*time.Second)
			rw, err := zklock.NewReadWrite(conn, root)
			if err != nil {
				t.Fatal(err)
			}
			conn.Close()
			testenv.Closing(t, rw.Read)
			return testenv.Closing(t, rw.Write)
		},
	})
}

func TestRWConformance(t *testing.T) {
	dlocktest.RunReadWrite(t, dlocktest.ReadWriteHarness{
		New: func(t *testing.T) (dlock.Locker, dlock.Locker) {
			rw := newRW(t)
			return rw.Read, rw.Write
		},
	})
}
