package redislock_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/driver"
)

// Only a *redis.Client with ContextTimeoutEnabled, under New's lock with
// no replicas to wait for, lets dlock make requests on the caller's
// goroutine; the fair lock never does (a timed-out fair attempt may have
// queued its waiter, so making it again is no idempotent retry).
func TestBoundsCalls(t *testing.T) {
	addr := "127.0.0.1:1" // no I/O: the clients are only inspected
	plain := redis.NewClient(&redis.Options{Addr: addr})
	bounded := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, ContextTimeoutEnabled: true})
	for _, c := range []interface{ Close() error }{plain, bounded, cluster} {
		t.Cleanup(func() { c.Close() })
	}
	for _, tc := range []struct {
		name     string
		client   redis.UniversalClient
		replicas int
		want     bool
	}{
		{"default options", plain, 0, false},
		{"ContextTimeoutEnabled", bounded, 0, true},
		{"ContextTimeoutEnabled, WithReplicas", bounded, 1, false},
		{"cluster, ContextTimeoutEnabled", cluster, 0, false},
	} {
		if got := redislock.BoundsCalls(tc.client, tc.replicas); got != tc.want {
			t.Errorf("%s: BoundsCalls = %v, want %v", tc.name, got, tc.want)
		}
	}
	fair, release := redislock.NewFairBackend(bounded, time.Second)
	defer release()
	if b, ok := fair.(driver.DeadlineBound); ok && b.BoundsCalls() {
		t.Error("the fair lock on a ContextTimeoutEnabled client: BoundsCalls = true, want false")
	}
}
