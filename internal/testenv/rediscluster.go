package testenv

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// RedisClusterClient is a Cluster client of servers (RedisClusterReplicated's),
// closed when t ends.
func RedisClusterClient(t testing.TB, servers []*RedisServer) *redis.ClusterClient {
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRedirects: 16})
	t.Cleanup(func() { c.Close() })
	return c
}

// RedisReplicaOf is the address of the replica of the Cluster's master at
// addr.
func RedisReplicaOf(ctx context.Context, t testing.TB, c *redis.ClusterClient, addr string) string {
	t.Helper()
	nodes, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var masterID string
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 2 && strings.HasPrefix(f[1], addr+"@") {
			masterID = f[0]
		}
	}
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 3 && strings.Contains(f[2], "slave") && f[3] == masterID {
			return strings.Split(f[1], "@")[0]
		}
	}
	t.Fatalf("no replica of %s in\n%s", addr, nodes)
	return ""
}

// FailOverRedisMaster fails the Cluster's master at addr over to its
// replica by CLUSTER FAILOVER, as an operator's planned failover does:
// the replica takes over once it has every write. It returns the
// replica's client (closed when t ends), whose ROLE says when it leads.
func FailOverRedisMaster(ctx context.Context, t testing.TB, c *redis.ClusterClient, addr string) *redis.Client {
	t.Helper()
	r := redis.NewClient(&redis.Options{Addr: RedisReplicaOf(ctx, t, c, addr)})
	t.Cleanup(func() { r.Close() })
	if err := r.ClusterFailover(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	return r
}
