package tablelock_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/election/electiontest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/schedlock/schedlocktest"
)

// TestGalera runs the conformance suite on a 3-node MariaDB Galera
// cluster, each new Locker on the next node: the lock table's rows are
// replicated and certified, so Lockers on different nodes exclude each
// other, and a certification conflict is a retry, not a second holder.
func TestGalera(t *testing.T) { dlocktest.Run(t, galeraHarness(t)) }

// Elections and jobs over Lockers on different Galera nodes: one leader,
// terms that grow, each slot run once.
func TestGaleraElection(t *testing.T) {
	h := galeraHarness(t)
	electiontest.Run(t, electiontest.Harness{New: h.New, Broken: h.Broken})
}

func TestGaleraJobs(t *testing.T) {
	schedlocktest.Run(t, schedlocktest.Harness{New: galeraHarness(t).New})
}

// galeraHarness is the conformance harness on the Galera cluster, each
// new Locker on the next node.
func galeraHarness(t *testing.T) dlocktest.Harness {
	dsns := testenv.GaleraDSNs(t)
	dbs := make([]*sql.DB, len(dsns))
	for i, dsn := range dsns {
		// Causal reads and writes (docs/deployments.md): without them a
		// node may not have applied another's release yet, and says the
		// free name is held (never a second holder).
		dbs[i] = testenv.Open(t, "mysql", dsn+"&wsrep_sync_wait=7")
	}
	migrated(t, func(testing.TB) *sql.DB { return dbs[0] })
	h := testenv.SQLHarness("mysql", func(t testing.TB) *sql.DB { return testenv.Open(t, "mysql", dsns[0]) }, dbs[0], newLocker)
	h.Dial = nil
	var next atomic.Int64
	h.New = func(t *testing.T, opts ...dlock.Option) dlock.Locker {
		return newLocker(t, dbs[next.Add(1)%int64(len(dbs))], opts...)
	}
	return h
}

// A Galera node killed under its holder: the holder's lease ends at its
// deadline (its renewals go nowhere), and a waiter on another node gets
// the lock only after that, at the row's expiry, with a larger token.
func TestGaleraNodeKilledMidHold(t *testing.T) {
	dsns := testenv.GaleraDSNs(t)
	migrated(t, func(t testing.TB) *sql.DB { return testenv.Open(t, "mysql", dsns[0]) })
	const ttl = 3 * time.Second
	holder := newLocker(t, testenv.Open(t, "mysql", dsns[0]+"&wsrep_sync_wait=7&timeout=1s&readTimeout=1s&writeTimeout=1s"), dlock.WithTTL(ttl))
	waiter := newLocker(t, testenv.Open(t, "mysql", dsns[1]+"&wsrep_sync_wait=7"), dlock.WithTTL(ttl))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	lease, err := holder.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	testenv.KillGaleraNode(t, 1)
	t.Cleanup(func() { testenv.GaleraDSNs(t) }) // the node rejoins for the next test
	succ, err := waiter.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer succ.Unlock(ctx)
	select {
	case <-lease.Done():
	default:
		t.Fatal("the waiter on another node was granted while the holder's Done was open")
	}
	if succ.Token() <= lease.Token() {
		t.Fatalf("the successor's token %d is not above the holder's %d", succ.Token(), lease.Token())
	}
}
