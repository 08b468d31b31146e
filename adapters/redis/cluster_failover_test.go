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
