package zklock_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func exists(c *zk.Conn) dlocktest.RoundTrip {
	return func(context.Context) error {
		_, _, err := c.Exists("/")
		return err
	}
}

// libLocker drives go-zookeeper's own zk.Lock through dlock.Locker, only
// so the benchmarks can run the same workload on it: it has no ctx, no
// re-entry and no token.
type libLocker struct{ conn *zk.Conn }

type libLease struct {
	dlock.Lease
	name string
	l    *zk.Lock
}

func (l libLocker) Lock(_ context.Context, name string) (dlock.Lease, error) {
	lk := zk.NewLock(l.conn, root+"/lib-"+name, zk.WorldACL(zk.PermAll))
	if err := lk.Lock(); err != nil {
		return nil, err
	}
	return &libLease{name: name, l: lk}, nil
}

func (l libLocker) TryLock(ctx context.Context, name string) (dlock.Lease, error) {
	return l.Lock(ctx, name)
}

func (l *libLease) Unlock(context.Context) error { return l.l.Unlock() }

// Token is 0: zk.Lock gives no fencing token.
func (l *libLease) Token() uint64 { return 0 }

const benchSession = 10 * time.Second

func BenchmarkUncontended(b *testing.B) {
	addrs := testenv.ZKAddrs(b)
	b.Run("zklock", func(b *testing.B) {
		conn := testenv.ZK(b, addrs, benchSession)
		dlocktest.BenchUncontended(b, newLocker(b, conn), exists(conn))
	})
	b.Run("go-zookeeper", func(b *testing.B) {
		conn := testenv.ZK(b, addrs, benchSession)
		dlocktest.BenchUncontended(b, libLocker{conn}, exists(conn))
	})
}

func BenchmarkContended(b *testing.B) {
	addrs := testenv.ZKAddrs(b)
	run := func(b *testing.B, mk func(*testing.B, *zk.Conn) dlock.Locker) {
		// Own sessions, like processes.
		dlocktest.BenchContended(b, func(b *testing.B) dlock.Locker { return mk(b, testenv.ZK(b, addrs, benchSession)) },
			exists(testenv.ZK(b, addrs, benchSession)))
	}
	b.Run("zklock", func(b *testing.B) {
		run(b, func(b *testing.B, c *zk.Conn) dlock.Locker { return newLocker(b, c) })
	})
	b.Run("go-zookeeper", func(b *testing.B) {
		run(b, func(_ *testing.B, c *zk.Conn) dlock.Locker { return libLocker{c} })
	})
}

// BenchmarkSeckill is W3 through zklock and go-zookeeper's zk.Lock, each
// on one session shared by the buyers; stock and orders are in
// PostgreSQL.
func BenchmarkSeckill(b *testing.B) {
	addrs := testenv.ZKAddrs(b)
	db := testenv.SaleDB(b, testenv.Postgres)
	b.Run("zklock", func(b *testing.B) {
		testenv.BenchSeckill(b, newLocker(b, testenv.ZK(b, addrs, benchSession)), db)
	})
	b.Run("go-zookeeper", func(b *testing.B) {
		testenv.BenchSeckill(b, libLocker{testenv.ZK(b, addrs, benchSession)}, db)
	})
}

func BenchmarkHerd(b *testing.B) {
	addrs := testenv.ZKAddrs(b)
	conn := testenv.ZK(b, addrs[:1], 30*time.Second) // one session: one pinger
	waiters := make([]dlock.Locker, 64)
	for i := range waiters {
		waiters[i] = newLocker(b, conn)
	}
	dlocktest.BenchHerd(b, newLocker(b, conn), waiters, func(context.Context) (int64, error) {
		return mntrPackets(addrs[0])
	})
}
