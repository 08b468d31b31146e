package redislock_test

import (
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/driver"
)

// Only a *redis.Client with ContextTimeoutEnabled, under New's lock with
// no replicas to wait for or under the fair lock, lets dlock make
// requests on the caller's goroutine.
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
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		want   bool
	}{
		{"default options", plain, false},
		{"ContextTimeoutEnabled", bounded, true},
		{"cluster, ContextTimeoutEnabled", cluster, false},
	} {
		fair, release := redislock.NewFairBackend(tc.client, time.Second)
		b, ok := fair.(driver.DeadlineBound)
		if got := ok && b.BoundsCalls(); got != tc.want {
			t.Errorf("fair lock, %s: BoundsCalls = %v, want %v", tc.name, got, tc.want)
		}
		release()
	}
}

// Every constructor refuses a nil client, also a nil *redis.Client or
// *redis.ClusterClient, which would otherwise fail (or panic) only at the
// first request.
func TestNilClient(t *testing.T) {
	var typed *redis.Client
	var cluster *redis.ClusterClient
	for _, c := range []redis.UniversalClient{nil, typed, cluster} {
		for what, mk := range map[string]func() (any, error){
			"New":          func() (any, error) { return redislock.New(c) },
			"NewFair":      func() (any, error) { return redislock.NewFair(c) },
			"NewReadWrite": func() (any, error) { return redislock.NewReadWrite(c) },
			"NewSemaphore": func() (any, error) { return redislock.NewSemaphore(c, "s", 1) },
			"NewLatch":     func() (any, error) { return redislock.NewLatch(c, "l") },
			"NewRedlock":   func() (any, error) { return redislock.NewRedlock([]redis.UniversalClient{c}) },
		} {
			if _, err := mk(); err == nil || !strings.Contains(err.Error(), "nil") {
				t.Errorf("%s(%T(nil)): %v, want an error saying the client is nil", what, c, err)
			}
		}
	}
}

// An option a semaphore has no use for is refused, not ignored.
func TestSemaphoreRefusesOptionsItIgnores(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	for what, opt := range map[string]dlock.Option{
		"WithHandOffs":     dlock.WithHandOffs(0),
		"WithoutAutoRenew": dlock.WithoutAutoRenew(),
		"WithOwner":        dlock.WithOwner("svc"),
		"zklock.WithACL":   zklock.WithACL(zk.WorldACL(zk.PermAll)),
		"WithReplicas":     redislock.WithReplicas(1),
	} {
		if _, err := redislock.NewSemaphore(c, "s", 3, opt); err == nil {
			t.Errorf("NewSemaphore with %s: accepted", what)
		} else if strings.Contains(err.Error(), "\n") {
			t.Errorf("NewSemaphore with %s: %q spans lines", what, err)
		}
	}
	s, err := redislock.NewSemaphore(c, "s", 3, dlock.WithTTL(time.Minute))
	if err != nil {
		t.Fatalf("NewSemaphore with WithTTL: %v", err)
	}
	_ = s.Close()
}
