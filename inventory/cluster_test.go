package inventory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/inventory"
)

// The redis strategy's gate on a Redis Cluster with replicas, when the
// master of the item's slot is failed over mid-sale (CLUSTER FAILOVER on
// its replica) or killed: the database decides every request the gate
// cannot, so each unit goes once and every request gets its outcome.
func TestGateClusterFailover(t *testing.T) {
	for _, how := range []string{"CLUSTER FAILOVER", "killed master"} {
		t.Run(strings.ReplaceAll(how, " ", "_"), func(t *testing.T) {
			servers := testenv.RedisClusterReplicated(t)
			c := testenv.RedisClusterClient(t, servers)
			db := database(t, "pgx")
			s, err := inventory.New(db, inventory.WithStrategy(inventory.Redis), inventory.WithRedis(c, prefix(t)))
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			if err := s.AddItem(ctx, "hot", 100, 0); err != nil {
				t.Fatal(err)
			}
			master, err := c.MasterForKey(ctx, "{hot}")
			if err != nil {
				t.Fatal(err)
			}
			masterAddr := master.Options().Addr
			var granted, soldOut atomic.Int64
			var wg sync.WaitGroup
			sem := make(chan struct{}, 16)
			for u := range 300 {
				if u == 60 { // mid-sale
					failOver(ctx, t, how, c, servers, masterAddr)
				}
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					res, err := s.Reserve(ctx, fmt.Sprint("r", u), int64(u+1), "hot", 1)
					switch {
					case err == nil && res.State == inventory.Reserved:
						granted.Add(1)
					case errors.Is(err, inventory.ErrSoldOut):
						soldOut.Add(1)
					default:
						t.Errorf("user %d: %+v, %v", u+1, res, err)
					}
				}()
				time.Sleep(10 * time.Millisecond) // the sale spans the failover
			}
			wg.Wait()
			it, err := s.Item(ctx, "hot")
			if err != nil {
				t.Fatal(err)
			}
			balanced(t, it)
			if granted.Load() != 100 || soldOut.Load() != 200 || it.Reserved != 100 {
				t.Errorf("%d reserved, %d sold out, item %+v; want 100, 200", granted.Load(), soldOut.Load(), it)
			}
		})
	}
}

// failOver fails over the master at addr: by CLUSTER FAILOVER on its
// replica, or by killing it.
func failOver(ctx context.Context, t *testing.T, how string, c *redis.ClusterClient, servers []*testenv.RedisServer, addr string) {
	t.Helper()
	if how == "CLUSTER FAILOVER" {
		testenv.FailOverRedisMaster(ctx, t, c, addr)
		return
	}
	for _, s := range servers {
		if s.Addr == addr {
			s.Stop()
		}
	}
}
