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
			var addrs []string
			for _, s := range servers {
				addrs = append(addrs, s.Addr)
			}
			cluster := func() *redis.ClusterClient {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRedirects: 16})
				t.Cleanup(func() { c.Close() })
				return c
			}
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
			replica := replicaOf(ctx, t, admin, masterAddr)
			switch how {
			case "CLUSTER FAILOVER":
				c := redis.NewClient(&redis.Options{Addr: replica})
				defer c.Close()
				if err := c.ClusterFailover(ctx).Err(); err != nil {
					t.Fatal(err)
				}
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

// replicaOf is the address of the replica of the master at addr.
func replicaOf(ctx context.Context, t *testing.T, c *redis.ClusterClient, addr string) string {
	t.Helper()
	nodes, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var masterID string
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && strings.HasPrefix(f[1], addr+"@") {
			masterID = f[0]
		}
	}
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && strings.Contains(f[2], "slave") && f[3] == masterID {
			return strings.Split(f[1], "@")[0]
		}
	}
	t.Fatalf("no replica of %s in\n%s", addr, nodes)
	return ""
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
	type hold struct {
		done    <-chan struct{}
		release func(context.Context) error
	}
	lease := func(l dlock.Lease) hold { return hold{l.Done(), l.Unlock} }
	never := make(chan struct{})
	// One cluster: after a planned failover it serves every slot again,
	// each master with a replica.
	var addrs []string
	for _, s := range testenv.RedisClusterReplicated(t) {
		addrs = append(addrs, s.Addr)
	}
	for _, p := range []struct {
		kind string
		// take holds name; try is a contender's attempt on it, which
		// must fail with ErrNotAcquired while the hold lasts.
		take, try func(t *testing.T, ctx context.Context, c *redis.ClusterClient, name string) (hold, error)
	}{
		{"fair", func(t *testing.T, ctx context.Context, c *redis.ClusterClient, name string) (hold, error) {
			l, err := redislock.NewFair(c, opts...)
			if err != nil {
				t.Fatal(err)
			}
			testenv.Closing(t, l)
			ls, err := l.Lock(ctx, name)
			if err != nil {
				return hold{}, err
			}
			return lease(ls), nil
		}, func(t *testing.T, ctx context.Context, c *redis.ClusterClient, name string) (hold, error) {
			l, err := redislock.NewFair(c, opts...)
			if err != nil {
				t.Fatal(err)
			}
			testenv.Closing(t, l)
			ls, err := l.TryLock(ctx, name)
			if err != nil {
				return hold{}, err
			}
			return lease(ls), nil
		}},
		{"write_then_read", func(t *testing.T, ctx context.Context, c *redis.ClusterClient, name string) (hold, error) {
			ls, err := newReadWrite(t, c, opts...).Write.Lock(ctx, name)
			if err != nil {
				return hold{}, err
			}
			return lease(ls), nil
		}, func(t *testing.T, ctx context.Context, c *redis.ClusterClient, name string) (hold, error) {
			ls, err := newReadWrite(t, c, opts...).Read.TryLock(ctx, name)
			if err != nil {
				return hold{}, err
			}
			return lease(ls), nil
		}},
		{"read_then_write", func(t *testing.T, ctx context.Context, c *redis.ClusterClient, name string) (hold, error) {
			ls, err := newReadWrite(t, c, opts...).Read.Lock(ctx, name)
			if err != nil {
				return hold{}, err
			}
			return lease(ls), nil
		}, func(t *testing.T, ctx context.Context, c *redis.ClusterClient, name string) (hold, error) {
			ls, err := newReadWrite(t, c, opts...).Write.TryLock(ctx, name)
			if err != nil {
				return hold{}, err
			}
			return lease(ls), nil
		}},
		{"semaphore", func(t *testing.T, ctx context.Context, c *redis.ClusterClient, name string) (hold, error) {
			s, err := redislock.NewSemaphore(c, name, 1, dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			p, err := s.Acquire(ctx, 1)
			if err != nil {
				return hold{}, err
			}
			return hold{never, p.Release}, nil
		}, func(t *testing.T, ctx context.Context, c *redis.ClusterClient, name string) (hold, error) {
			s, err := redislock.NewSemaphore(c, name, 1, dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			p, err := s.TryAcquire(ctx, 1)
			if err != nil {
				return hold{}, err
			}
			return hold{never, p.Release}, nil
		}},
	} {
		t.Run(p.kind, func(t *testing.T) {
			cluster := func() *redis.ClusterClient {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRedirects: 16})
				t.Cleanup(func() { c.Close() })
				return c
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*dlocktest.Timeout)
			defer cancel()
			name := dlocktest.Name(t)
			h, err := p.take(t, ctx, cluster(), name)
			if err != nil {
				t.Fatal(err)
			}
			admin := cluster()
			master, err := admin.MasterForKey(ctx, redislock.LockKey(name))
			if err != nil {
				t.Fatal(err)
			}
			masterAddr := master.Options().Addr
			c := redis.NewClient(&redis.Options{Addr: replicaOf(ctx, t, admin, masterAddr)})
			defer c.Close()
			if err := c.ClusterFailover(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			contender := cluster()
			// Past the failover (the old master is a replica again) and
			// a while more, the contender is refused.
			moved := false
			for until := time.Now().Add(4 * time.Second); time.Now().Before(until) || !moved; {
				select {
				case <-h.done:
					t.Fatalf("the hold ended across a planned failover")
				default:
				}
				other, err := p.try(t, ctx, contender, name)
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
			other, err := p.try(t, ctx, contender, name)
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
