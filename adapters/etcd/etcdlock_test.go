package etcdlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	etcdlock "github.com/dlockhq/dlock/adapters/etcd"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/election/electiontest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/internal/testenv/etcdenv"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const root = "dlock-test"

// ttl is the TTL of the suites' Lockers: etcd's shortest lease with its
// default heartbeat and election timeout is 2 s.
const ttl = 2 * time.Second

func newLocker(t testing.TB, c *clientv3.Client, opts ...dlock.Option) *etcdlock.Locker {
	t.Helper()
	l, err := etcdlock.New(c, root, append([]dlock.Option{dlock.WithTTL(ttl)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}

// noOrphans checks that no waiter's key is left under root.
func noOrphans(t *testing.T, c *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, root+"/lock/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		t.Errorf("key left behind: %s", kv.Key)
	}
}

// harness gives each Locker a client of its own, as separate processes
// would have.
func harness(endpoints []string) dlocktest.Harness {
	return dlocktest.Harness{
		New: func(t *testing.T, opts ...dlock.Option) dlock.Locker {
			return newLocker(t, etcdenv.Client(t, endpoints), opts...)
		},
		Broken: func(t *testing.T) dlock.Locker {
			c := etcdenv.Client(t, endpoints)
			l := newLocker(t, c)
			c.Close()
			return l
		},
		TTL: ttl,
	}
}

func TestConformance(t *testing.T) {
	h := harness(etcdenv.Endpoints())
	h.Addr = strings.TrimPrefix(etcdenv.Endpoints()[0], "http://")
	h.Dial = func(t *testing.T, via string, opts ...dlock.Option) dlock.Locker {
		return newLocker(t, etcdenv.Client(t, []string{via}), opts...)
	}
	dlocktest.Run(t, h)
	noOrphans(t, etcdenv.Client(t, etcdenv.Endpoints()))
}

func TestClusterConformance(t *testing.T) {
	c := etcdenv.StartCluster(t)
	h := harness(c.Endpoints)
	h.Broken = nil // run on the single member
	h.Workers, h.Increments = 5, 40
	dlocktest.Run(t, h)
	noOrphans(t, etcdenv.Client(t, c.Endpoints))
}

func TestElection(t *testing.T) {
	endpoints := etcdenv.Endpoints()
	h := harness(endpoints)
	electiontest.Run(t, electiontest.Harness{New: h.New, Broken: h.Broken, TTL: ttl})
}

func TestSchedlock(t *testing.T) {
	h := harness(etcdenv.Endpoints())
	schedlocktest.Run(t, schedlocktest.Harness{New: h.New, TTL: ttl})
}
