package faults_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/faults"
	"github.com/dlockhq/dlock/internal/servers"
	"github.com/dlockhq/dlock/internal/testenv"
)

// The workers' lease in failover runs: longer than the failover takes (a
// Sentinel's promotion takes seconds, a standby's less than one), so that
// the leases the failover loses are still open on their holders' side
// when the replica is promoted.
const (
	sentinelTTL = 10 * time.Second
	failoverTTL = 4 * time.Second
)

// envSentinel is a worker's Sentinel: "address|master name".
const envSentinel = "DLOCK_FAULT_SENTINEL"

// sentinelBackends are the Redis lockers behind a Sentinel, made in a
// worker process from envSentinel: the default (asynchronous replication)
// and failover-safe mode, whose grants the one replica acknowledged.
var sentinelBackends = map[string]func(ttl time.Duration) (dlock.Locker, func(), error){
	"redis/sentinel":          sentinelLocker(),
	"redis/sentinel+replicas": sentinelLocker(redislock.WithReplicas(1)),
}

func sentinelLocker(opts ...dlock.Option) func(time.Duration) (dlock.Locker, func(), error) {
	return func(ttl time.Duration) (dlock.Locker, func(), error) {
		addr, master, _ := strings.Cut(os.Getenv(envSentinel), "|")
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: []string{addr}})
		l, err := redislock.New(c, append(opts, dlock.WithTTL(ttl))...)
		return l, func() { c.Close() }, err
	}
}

// TestFailover fails the lock's server over to its replica under lock
// load: the primary is killed while a worker holds the lock, and the
// replica is promoted, either caught up or lagging (its replication
// stream held back for a while before, so what the primary wrote then is
// lost with it). Each worker runs two call chains on its Locker, so
// hand-offs between them meet the failover too.
//
// In failover-safe modes (Redis WithReplicas, PostgreSQL with a
// synchronous standby and the lock table) every lease a holder was told
// it has is on the promoted replica: the lease rule holds strictly. With
// asynchronous replication a failover can lose grants and renewals, so a
// successor may be granted while the holder's lease is open: those
// overlaps are counted, as the cost of the mode, and only token order
// (tokens never repeat or go back across the failover, so the fenced
// resource refuses every stale write) fails the test.
func TestFailover(t *testing.T) {
	for _, mode := range []struct {
		name    string
		backend string
		safe    bool
	}{
		{"redis/async", "redis/sentinel", false},
		{"redis/replicas", "redis/sentinel+replicas", true},
	} {
		for _, lagging := range []bool{false, true} {
			t.Run(mode.name+"/"+lagName(lagging), func(t *testing.T) {
				var total tally
				for range rounds() {
					// A fresh Sentinel each round: it delays a second
					// failover of one master by twice its failover timeout.
					s := testenv.StartRedisSentinel(t)
					r := newRun(t, mode.backend, 3, envSentinel+"="+s.SentinelAddr+"|"+s.MasterName, envTTL+"="+sentinelTTL.String(), envChains+"=2")
					r.recordFor(time.Second)
					failover(r, sentinelTTL, mode.safe, lagging, s.Lag, func() { s.Failover(t) })
					r.recordUntil(func() bool { return r.grantsSince(-1, faults.Now()-int64(time.Second)) > 0 })
					total.add(r.check(mode.safe))
				}
				logRow(t, total)
			})
		}
	}
	for _, mode := range []struct {
		name     string
		backends []string
		start    func(testing.TB) *testenv.Replicated
		safe     bool
	}{
		{"postgres/async", []string{"tablelock/postgres", "advisory/postgres"},
			func(t testing.TB) *testenv.Replicated { return testenv.PostgresReplicated(t, false) }, false},
		{"postgres/sync", []string{"tablelock/postgres"},
			func(t testing.TB) *testenv.Replicated { return testenv.PostgresReplicated(t, true) }, true},
		{"mariadb/async", []string{"tablelock/mysql", "advisory/mysql"}, testenv.MariaDBReplicated, false},
	} {
		for _, backend := range mode.backends {
			for _, lagging := range []bool{false, true} {
				t.Run(mode.name+"/"+backend+"/"+lagName(lagging), func(t *testing.T) {
					var total tally
					for range rounds() {
						// A fresh pair each round: the old primary is gone.
						pair := mode.start(t)
						migrateDSN(t, pair.Driver, pair.DSN)
						pair.WaitReplicated(t)
						env := servers.PostgresEnv
						if pair.Driver == "mysql" {
							env = servers.MySQLEnv
						}
						r := newRun(t, backend, 3, env+"="+pair.DSN, envTTL+"="+failoverTTL.String(), envChains+"=2")
						r.recordFor(time.Second)
						failover(r, failoverTTL, mode.safe, lagging, pair.Lag, func() { pair.Failover(t) })
						r.recordUntil(func() bool { return r.grantsSince(-1, faults.Now()-int64(time.Second)) > 0 })
						total.add(r.check(mode.safe))
					}
					logRow(t, total)
				})
			}
		}
	}
}

// failover runs one failover under r's load while a worker holds the
// lock for long (across the failover). A lagging replica stops receiving
// for longer than a TTL before the failover, so that what it last saw of
// the lock has expired when it is promoted: in asynchronous modes from
// before the holder's grant, which the replica then misses; in safe modes
// from after it (no grant can be acknowledged while it lags), so that the
// holder's renewals are what the replica misses.
func failover(r *run, ttl time.Duration, safe, lagging bool, lag, failover func()) {
	holder := r.live[0]
	switch {
	case lagging && !safe:
		lag()
		r.recordFor(500 * time.Millisecond)
		r.holdLong(holder)
		r.recordFor(ttl + time.Second)
	case lagging:
		r.holdLong(holder)
		lag()
		r.recordFor(ttl + time.Second)
	default:
		r.holdLong(holder)
	}
	began := time.Now()
	failover()
	r.t.Logf("failover took %v", time.Since(began))
	r.recordFor(ttl + time.Second)
}

func lagName(lagging bool) string {
	if lagging {
		return "lagging"
	}
	return "caught-up"
}

// add sums another run's counts into n.
func (n *tally) add(o tally) {
	n.overtaken += o.overtaken
	n.overlaps += o.overlaps
	n.longest = max(n.longest, o.longest)
	n.regressions += o.regressions
	n.wrote += o.wrote
	n.accepted += o.accepted
	n.rejected += o.rejected
	n.unfencedLost += o.unfencedLost
}

// logRow logs a row's totals, the line docs/failover.md's table is made
// from.
func logRow(t *testing.T, n tally) {
	t.Logf("FAILOVER %s rounds=%d holders-overtaken-before-told=%d longest=%v overtaken=%d token-regressions=%d "+
		"writes=%d accepted=%d stale-refused=%d unfenced-lost=%d",
		t.Name(), rounds(), n.overlaps, n.longest.Round(time.Millisecond), n.overtaken, n.regressions, n.wrote, n.accepted, n.rejected, n.unfencedLost)
}

// migrateDSN brings the schema of the database at dsn up.
func migrateDSN(t *testing.T, driver, dsn string) {
	t.Helper()
	migrate(t, &testenv.SQLServer{Driver: driver, DSN: dsn})
}
