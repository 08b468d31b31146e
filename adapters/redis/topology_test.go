package redislock_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/tablelock"
)

// The lock and the fair lock on a 3-master Redis Cluster: one lock's keys
// share a slot (hash tags), and waiters wake by sharded pub/sub.
func TestClusterConformance(t *testing.T) {
	addrs := testenv.RedisCluster(t, 3)
	// Fresh servers hold first grants back for a TTL (see the package
	// doc, Restarts): wait that out before the suite's deadlines start.
	for _, a := range addrs {
		testenv.WaitRedisUp(t, a, dlock.DefaultTTL)
	}
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
	s.Master.WaitUp(t, dlock.DefaultTTL) // as in TestClusterConformance
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
		s.WaitPromoted(t)
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

// Failover-safe mode (WithReplicas): a grant that the replica has not
// acknowledged is refused and leaves nothing behind; a renewal that is not
// acknowledged does not extend the lease; a grant that was acknowledged
// survives the failover that promotes the replica (and is renewed again
// once the old master is back as the new one's replica).
func TestReplicas(t *testing.T) {
	s := testenv.StartRedisSentinel(t)
	s.Master.WaitUp(t, dlock.DefaultTTL) // as in TestSentinel
	safe := func(t *testing.T, opts ...dlock.Option) *redislock.Locker {
		return newLocker(t, failover(t, s), append([]dlock.Option{redislock.WithReplicas(1)}, opts...)...)
	}
	t.Run("Conformance", func(t *testing.T) {
		dlocktest.Run(t, dlocktest.Harness{
			New: func(t *testing.T, opts ...dlock.Option) dlock.Locker { return safe(t, opts...) },
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	t.Run("UnacknowledgedGrantRefused", func(t *testing.T) {
		name := dlocktest.Name(t)
		l := safe(t, dlock.WithTTL(300*time.Millisecond))
		s.Replica.Freeze()
		_, err := l.TryLock(ctx, name)
		s.Replica.Thaw()
		if !errors.Is(err, redislock.ErrNotReplicated) {
			t.Fatalf("TryLock with the replica frozen: %v, want ErrNotReplicated", err)
		}
		dlocktest.Eventually(t, func() bool {
			_, held, err := l.Inspect(ctx, name)
			return err == nil && !held
		}, "the refused grant was released")
		lease, err := l.TryLock(ctx, name)
		if err != nil {
			t.Fatalf("TryLock with the replica back: %v", err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("UnacknowledgedRenewalEndsLease", func(t *testing.T) {
		l := safe(t, dlock.WithTTL(600*time.Millisecond))
		lease, err := l.Lock(ctx, dlocktest.Name(t))
		if err != nil {
			t.Fatal(err)
		}
		s.Replica.Freeze()
		defer s.Replica.Thaw()
		select {
		case <-lease.Done():
		case <-time.After(dlocktest.Timeout):
			t.Fatal("the lease outlived renewals no replica acknowledged")
		}
		if !errors.Is(lease.Err(), dlock.ErrLost) {
			t.Fatalf("lease ended with %v, want ErrLost", lease.Err())
		}
	})
	t.Run("GrantSurvivesFailover", func(t *testing.T) {
		name := dlocktest.Name(t)
		// The fresh master holds the name's first grant back for one TTL
		// (the package doc's "Restarts"): take it once with a short one.
		if err := dlock.Do(ctx, safe(t, dlock.WithTTL(time.Second)), name, func(context.Context, dlock.Lease) error { return nil }); err != nil {
			t.Fatal(err)
		}
		holder := safe(t, dlock.WithTTL(time.Minute))
		lease, err := holder.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		s.Failover(t)
		var refreshErr error
		dlocktest.Eventually(t, func() bool { // the holder's client finds the new master
			refreshErr = lease.Refresh(ctx)
			return refreshErr == nil || errors.Is(refreshErr, dlock.ErrNotHeld)
		}, "the holder reaches the promoted replica")
		if refreshErr != nil {
			t.Fatalf("an acknowledged grant did not survive the failover: %v", refreshErr)
		}
		next := newLocker(t, failover(t, s))
		if _, err := next.TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("TryLock on the promoted replica while the holder keeps its lease: %v", err)
		}
	})
}

// Settings are checked before any I/O: WithReplicas needs a replica, and
// each option of this package is refused by a constructor that would not
// apply it, and by another package's.
func TestReplicasOption(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, n := range []int{0, -1} {
		if _, err := redislock.New(c, redislock.WithReplicas(n)); err == nil {
			t.Errorf("WithReplicas(%d) accepted", n)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	if _, err := redislock.New(ring, redislock.WithReplicas(1)); err == nil {
		t.Error("WithReplicas on a Ring accepted")
	}
	if _, err := redislock.NewFair(c, redislock.WithReplicas(1)); err == nil {
		t.Error("NewFair took WithReplicas, which it does not apply")
	}
	if _, err := redislock.New(c, redislock.WithQueueTimeout(time.Second)); err == nil {
		t.Error("New took WithQueueTimeout, an option of NewFair")
	}
	if _, err := redislock.NewFair(c, redislock.WithQueueTimeout(time.Millisecond)); err == nil {
		t.Error("WithQueueTimeout(1ms) accepted")
	}
	if _, err := redislock.NewSemaphore(c, "s", 1, redislock.WithReplicas(1)); err == nil {
		t.Error("NewSemaphore took WithReplicas, which it does not apply")
	}
	db, err := sql.Open("pgx", "postgres://127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := tablelock.New(db, redislock.WithReplicas(1)); err == nil || !strings.Contains(err.Error(), "adapters/redis") {
		t.Errorf("tablelock.New with a redislock option: %v, want an error naming the option's package", err)
	}
}
