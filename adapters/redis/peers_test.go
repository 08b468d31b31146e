package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Peer libraries driven through dlock.Locker, only so that the benchmarks
// run the same workloads on them in the same run: they have no re-entry
// and no token here, and only rueidislock renews. Their leases last as
// dlock's default TTL, and a waiter retries as each library's
// documentation suggests.

// peerLease is a peer's hold: Unlock is all the benchmarks call.
type peerLease struct {
	dlock.Lease
	unlock func(context.Context) error
}

func (l *peerLease) Unlock(ctx context.Context) error { return l.unlock(ctx) }

// Token is 0: the peers give no fencing token (a fenced write with token
// 0 passes a resource that has seen no other).
func (l *peerLease) Token() uint64 { return 0 }

// redsyncLocker is go-redsync/redsync on one server.
type redsyncLocker struct{ rs *redsync.Redsync }

func (l redsyncLocker) Lock(ctx context.Context, name string) (dlock.Lease, error) {
	m := l.rs.NewMutex("redsync:"+name, redsync.WithExpiry(dlock.DefaultTTL), redsync.WithTries(1<<30),
		redsync.WithRetryDelay(time.Millisecond))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return &peerLease{unlock: func(ctx context.Context) error { _, err := m.UnlockContext(ctx); return err }}, nil
}

func (l redsyncLocker) TryLock(ctx context.Context, name string) (dlock.Lease, error) {
	return l.Lock(ctx, name)
}

// bsmLocker is bsm/redislock, retrying every millisecond.
type bsmLocker struct{ c *bsm.Client }

func (l bsmLocker) Lock(ctx context.Context, name string) (dlock.Lease, error) {
	lk, err := l.c.Obtain(ctx, "bsm:"+name, dlock.DefaultTTL, &bsm.Options{RetryStrategy: bsm.LinearBackoff(time.Millisecond)})
	if err != nil {
		return nil, err
	}
	return &peerLease{unlock: lk.Release}, nil
}

func (l bsmLocker) TryLock(ctx context.Context, name string) (dlock.Lease, error) {
	return l.Lock(ctx, name)
}

// rueidisLocker is rueidislock on one server (one key, KeyMajority 1),
// which queues a process's waiters locally and waits for a release with
// client-side caching invalidations; Unlock is its cancel.
type rueidisLocker struct{ l rueidislock.Locker }

// Lock waits in rounds of rueidisRound: with 32 contending processes on
// this machine, rueidislock sometimes misses the invalidation that a
// release sends, and its waiter then waits until its ctx ends (it polls
// only without client-side caching). A round that ends starts the wait
// over, so the benchmark finishes, and each missed wake-up costs the
// peer up to a round.
func (l rueidisLocker) Lock(ctx context.Context, name string) (dlock.Lease, error) {
	for {
		// A cancel, not a deadline: a hold granted in time lives on
		// past the round, until its Unlock.
		round, abort := context.WithCancel(ctx)
		timer := time.AfterFunc(rueidisRound, abort)
		_, cancel, err := l.l.WithContext(round, name)
		if err == nil && timer.Stop() {
			return &peerLease{unlock: func(context.Context) error { cancel(); abort(); return nil }}, nil
		}
		if err == nil {
			cancel() // granted as the round ended, which took it back
		}
		abort()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
}

const rueidisRound = time.Second

func (l rueidisLocker) TryLock(ctx context.Context, name string) (dlock.Lease, error) {
	return l.Lock(ctx, name)
}

func newRueidis(b *testing.B, addr string) dlock.Locker {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		KeyMajority:  1,
		KeyValidity:  dlock.DefaultTTL,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	return rueidisLocker{l}
}

// peers makes each peer's Locker on a client of its own.
var peers = []struct {
	name string
	new  func(b *testing.B, addr string) dlock.Locker
}{
	{"redsync", func(b *testing.B, addr string) dlock.Locker {
		return redsyncLocker{redsync.New(goredis.NewPool(client(b, addr)))}
	}},
	{"bsm-redislock", func(b *testing.B, addr string) dlock.Locker { return bsmLocker{bsm.New(client(b, addr))} }},
	{"rueidislock", newRueidis},
}

// BenchmarkUncontendedPeers is W1 on the peers, beside BenchmarkUncontended.
func BenchmarkUncontendedPeers(b *testing.B) {
	addr := testenv.RedisAddr(b)
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			dlocktest.BenchUncontended(b, p.new(b, addr), ping(client(b, addr)))
		})
	}
}

// BenchmarkSeckillPeers is W3 on the peers, beside BenchmarkSeckill.
func BenchmarkSeckillPeers(b *testing.B) {
	addr := testenv.RedisAddr(b)
	db := testenv.SaleDB(b, testenv.Postgres)
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) { testenv.BenchSeckill(b, p.new(b, addr), db) })
	}
}

// BenchmarkContendedPeers is W2 on the peers, beside BenchmarkContended.
func BenchmarkContendedPeers(b *testing.B) {
	addr := testenv.RedisAddr(b)
	for _, p := range peers {
		b.Run(p.name, func(b *testing.B) {
			dlocktest.BenchContended(b, func(b *testing.B) dlock.Locker { return p.new(b, addr) }, ping(client(b, addr)))
		})
	}
}
