package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// A Redis Cluster with a replica per master, in failover-safe mode
// (WithReplicas(1)): the master of a held lock's slot is failed over,
// by CLUSTER FAILOVER on its replica or by killing it. The promoted
// replica has the hold (its grant waited for it), so no contender is
// granted while the holder's Done is open, and the holder keeps or
// loses its lease by the lease rule.
func TestClusterFailoverMidHold(t *testing.T) {
	for _, how := range []string{"CLUSTER FAILOVER", "killed master"} {
		t.Run(strings.ReplaceAll(how, " ", "_"), func(t *testing.T) {
			servers := testenv.RedisClusterReplicated(t)
			cluster := func() *redis.ClusterClient { return testenv.RedisClusterClient(t, servers) }
			const ttl = 8 * time.Second
			opts := []dlock.Option{dlock.WithTTL(ttl), redislock.WithReplicas(1), redislock.WithRestartWindow(dlock.MinTTL)}
			holder, contender := newLocker(t, cluster(), opts...), newLocker(t, cluster(), opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 2*dlocktest.Timeout)
			defer cancel()
			name := dlocktest.Name(t)
			lease, err := holder.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			admin := cluster()
			master, err := admin.MasterForKey(ctx, redislock.LockKey(name))
			if err != nil {
				t.Fatal(err)
			}
			masterAddr := master.Options().Addr
			switch how {
			case "CLUSTER FAILOVER":
				testenv.FailOverRedisMaster(ctx, t, admin, masterAddr)
			default:
				for _, s := range servers {
					if s.Addr == masterAddr {
						s.Stop()
					}
				}
			}
			// Until the holder's lease ends (or a while past the
			// failover), nobody else is granted.
			until := time.Now().Add(ttl + 2*time.Second)
			for time.Now().Before(until) {
				select {
				case <-lease.Done():
					until = time.Now() // ended: a grant now is the lease rule's
				default:
				}
				l, err := contender.TryLock(ctx, name)
				if err == nil {
					select {
					case <-lease.Done():
						l.Unlock(ctx)
					default:
						t.Fatalf("after %s, a contender was granted while the holder's Done was open", how)
					}
					return
				}
				if !errors.Is(err, dlock.ErrNotAcquired) && ctx.Err() != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			select {
			case <-lease.Done():
				if how == "CLUSTER FAILOVER" {
					// The replica took over with every write: nothing
					// was lost for the holder to be told of.
					t.Fatalf("the holder lost its lease across a planned failover: %v", lease.Err())
				}
				t.Logf("after %s the holder's lease ended: %v", how, lease.Err())
			default:
				if err := lease.Unlock(ctx); err != nil {
					t.Fatalf("the holder's Unlock after %s: %v", how, err)
				}
				t.Logf("after %s the holder kept its lease to its Unlock", how)
			}
		})
	}
}

// The fair lock, both sides of the read-write lock and the semaphore on a
// Redis Cluster with replicas, when the master of their slot hands over
// to its replica (CLUSTER FAILOVER: the replica takes over once it has
// every write, as an operator's planned failover does). Each hold
// survives it: no contender is granted while it is held, and its release
// finds it. (They have no failover-safe mode: a killed master can take
// their last grants with it. New's lock WithReplicas is the one that
// survives that, TestClusterFailoverMidHold.)
func TestClusterManualFailoverOtherPrimitives(t *testing.T) {
	const ttl = 8 * time.Second
	opts := []dlock.Option{dlock.WithTTL(ttl)}
	// One cluster: after a planned failover it serves every slot again,
	// each master with a replica.
	servers := testenv.RedisClusterReplicated(t)
	fair := func(t *testing.T, c *redis.ClusterClient, name string) taker {
		l, err := redislock.NewFair(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return lockerTaker(testenv.Closing(t, l), name)
	}
	writer := func(t *testing.T, c *redis.ClusterClient, name string) taker {
		return lockerTaker(newReadWrite(t, c, opts...).Write, name)
	}
	reader := func(t *testing.T, c *redis.ClusterClient, name string) taker {
		return lockerTaker(newReadWrite(t, c, opts...).Read, name)
	}
	semaphore := func(t *testing.T, c *redis.ClusterClient, name string) taker {
		s, err := redislock.NewSemaphore(c, name, 1, dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return semaphoreTaker(s)
	}
	for _, p := range []struct {
		kind string
		// take makes the side that holds, try the contender's side,
		// whose attempts must fail with ErrNotAcquired while it holds.
		take, try func(t *testing.T, c *redis.ClusterClient, name string) taker
	}{
		{"fair", fair, fair},
		{"write_then_read", writer, reader},
		{"read_then_write", reader, writer},
		{"semaphore", semaphore, semaphore},
	} {
		t.Run(p.kind, func(t *testing.T) {
			cluster := func() *redis.ClusterClient { return testenv.RedisClusterClient(t, servers) }
			ctx, cancel := context.WithTimeout(context.Background(), 2*dlocktest.Timeout)
			defer cancel()
			name := dlocktest.Name(t)
			h, err := p.take(t, cluster(), name)(ctx, true)
			if err != nil {
				t.Fatal(err)
			}
			admin := cluster()
			master, err := admin.MasterForKey(ctx, redislock.LockKey(name))
			if err != nil {
				t.Fatal(err)
			}
			c := testenv.FailOverRedisMaster(ctx, t, admin, master.Options().Addr)
			contender := p.try(t, cluster(), name)
			// Past the failover (the old master is a replica again) and
			// a while more, the contender is refused.
			moved := false
			for until := time.Now().Add(4 * time.Second); time.Now().Before(until) || !moved; {
				select {
				case <-h.done:
					t.Fatalf("the hold ended across a planned failover")
				default:
				}
				other, err := contender(ctx, false)
				if err == nil {
					_ = other.release(ctx)
					t.Fatalf("a contender was granted while the %s hold lasted, across a planned failover", p.kind)
				}
				if !errors.Is(err, dlock.ErrNotAcquired) {
					t.Logf("contender during the failover: %v", err)
				}
				if !moved {
					if role, err := c.Do(ctx, "ROLE").Slice(); err == nil && len(role) > 0 && role[0] == "master" {
						moved = true
					} else if ctx.Err() != nil {
						t.Fatal("the slot's replica did not take over")
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err := h.release(ctx); err != nil {
				t.Fatalf("the %s hold's release after a planned failover: %v", p.kind, err)
			}
			other, err := contender(ctx, false)
			if err != nil {
				t.Fatalf("a contender after the release: %v", err)
			}
			_ = other.release(ctx)
		})
	}
}

// newReadWrite is a read-write lock on c, closed with t.
func newReadWrite(t *testing.T, c redis.UniversalClient, opts ...dlock.Option) *redislock.ReadWrite {
	t.Helper()
	rw, err := redislock.NewReadWrite(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Closing(t, rw.Read)
	testenv.Closing(t, rw.Write)
	return rw
}

// hold is a lock's or a permit's hold: when it ends (never, for a
// permit), and how to give it back.
type hold struct {
	done    <-chan struct{}
	release func(context.Context) error
}

// taker takes a hold: waiting for it, or trying once.
type taker func(ctx context.Context, wait bool) (hold, error)

// lockerTaker takes l's lock of name.
func lockerTaker(l dlock.Locker, name string) taker {
	return func(ctx context.Context, wait bool) (hold, error) {
		lock := l.TryLock
		if wait {
			lock = l.Lock
		}
		ls, err := lock(ctx, name)
		if err != nil {
			return hold{}, err
		}
		return hold{ls.Done(), ls.Unlock}, nil
	}
}

// semaphoreTaker takes one of s's permits.
func semaphoreTaker(s *redislock.Semaphore) taker {
	return func(ctx context.Context, wait bool) (hold, error) {
		acquire := s.TryAcquire
		if wait {
			acquire = s.Acquire
		}
		p, err := acquire(ctx, 1)
		if err != nil {
			return hold{}, err
		}
		return hold{nil, p.Release}, nil
	}
}
