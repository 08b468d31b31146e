package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// The lock and the fair lock on a 3-master Redis Cluster: one lock's keys
// share a slot (hash tags), and waiters wake by sharded pub/sub.
func TestClusterConformance(t *testing.T) {
	addrs := testenv.RedisCluster(t, 3)
	cluster := func(t *testing.T) *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
		t.Cleanup(func() { c.Close() })
		return c
	}
	t.Run("Lock", func(t *testing.T) {
		dlocktest.Run(t, dlocktest.Harness{
			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
				return newLocker(t, cluster(t), opts...)
			},
		})
	})
	t.Run("Fair", func(t *testing.T) {
		dlocktest.Run(t, dlocktest.Harness{
			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
				l, err := redislock.NewFair(cluster(t), opts...)
				if err != nil {
					t.Fatal(err)
				}
				return testenv.Closing(t, l)
			},
		})
	})
}

func failover(t *testing.T, s *testenv.RedisSentinel) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: []string{s.SentinelAddr}})
	t.Cleanup(func() { c.Close() })
	return c
}

// Through Sentinel (a failover client), then across a failover: the
// master is killed, Sentinel promotes the replica; the holder keeps its
// lock (replicated in time) or is told it lost it, and the next holder's
// token is larger either way.
func TestSentinel(t *testing.T) {
	s := testenv.StartRedisSentinel(t)
	t.Run("Conformance", func(t *testing.T) {
		dlocktest.Run(t, dlocktest.Harness{
			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
				return newLocker(t, failover(t, s), opts...)
			},
		})
	})
	t.Run("Failover", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
		defer cancel()
		name := dlocktest.Name(t)
		holder := newLocker(t, failover(t, s), dlock.WithTTL(2*time.Second))
		lease, err := holder.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		s.Master.Stop()
		sentinel := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddr})
		defer sentinel.Close()
		for {
			addr, err := sentinel.GetMasterAddrByName(ctx, s.MasterName).Result()
			if err == nil && addr[0]+":"+addr[1] == s.Replica.Addr {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("Sentinel did not promote the replica: %v %v", addr, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		next := newLocker(t, failover(t, s))
		// The lock was replicated (asynchronously) before the failover:
		// if it survived, the holder keeps it and nobody else gets it; if
		// not, the holder is told. Either way the next token is larger.
		var err2 error
		for range 50 { // the holder's client finds the new master
			if err2 = lease.Refresh(ctx); err2 == nil || errors.Is(err2, dlock.ErrNotHeld) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err2 == nil {
			t.Log("the lock survived the failover")
			if _, err := next.TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryLock while the holder kept its lock across the failover: %v", err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			t.Logf("the lock did not survive the failover: %v", err2)
			select {
			case <-lease.Done():
			case <-time.After(dlocktest.Timeout):
				t.Fatal("the holder was not told its lock was lost")
			}
		}
		taken, err := next.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		defer taken.Unlock(ctx)
		if taken.Token() <= lease.Token() {
			t.Fatalf("token %d after the failover, %d before", taken.Token(), lease.Token())
		}
	})
}
