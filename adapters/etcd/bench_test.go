package etcdlock_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlockhq/dlock"
	etcdlock "github.com/dlockhq/dlock/adapters/etcd"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/internal/testenv/etcdenv"
)

// benchTTL is the Lockers' TTL in the benchmarks: the default, so that
// keep-alives do not count against a hand-off.
const benchTTL = dlock.DefaultTTL

func get(c *clientv3.Client) dlocktest.RoundTrip {
	return func(ctx context.Context) error {
		_, err := c.Get(ctx, "dlock-ping")
		return err
	}
}

// mutexLocker drives etcd's own concurrency.Mutex through dlock.Locker,
// only so the benchmarks can run the same workload on it: one session
// (lease) per Locker, kept alive by the session's goroutine, as its
// documentation shows; no re-entry, and the token is the key's create
// revision as dlock's.
type mutexLocker struct{ s *concurrency.Session }

type mutexLease struct {
	dlock.Lease
	m *concurrency.Mutex
}

func newMutexLocker(b testing.TB, c *clientv3.Client) mutexLocker {
	s, err := concurrency.NewSession(c, concurrency.WithTTL(int(benchTTL/time.Second)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return mutexLocker{s}
}

func (l mutexLocker) Lock(ctx context.Context, name string) (dlock.Lease, error) {
	m := concurrency.NewMutex(l.s, root+"/mutex/"+name)
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return &mutexLease{m: m}, nil
}

func (l mutexLocker) TryLock(ctx context.Context, name string) (dlock.Lease, error) {
	m := concurrency.NewMutex(l.s, root+"/mutex/"+name)
	if err := m.TryLock(ctx); err != nil {
		return nil, err
	}
	return &mutexLease{m: m}, nil
}

func (l *mutexLease) Unlock(ctx context.Context) error { return l.m.Unlock(ctx) }

func (l *mutexLease) Token() uint64 { return uint64(l.m.Header().Revision) }

func benchLocker(b testing.TB, c *clientv3.Client) *etcdlock.Locker {
	l, err := etcdlock.New(c, root, dlock.WithTTL(benchTTL))
	if err != nil {
		b.Fatal(err)
	}
	return testenv.Closing(b, l)
}

func BenchmarkUncontended(b *testing.B) {
	eps := etcdenv.Endpoints()
	b.Run("etcdlock", func(b *testing.B) {
		c := etcdenv.Client(b, eps)
		dlocktest.BenchUncontended(b, benchLocker(b, c), get(c))
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		c := etcdenv.Client(b, eps)
		dlocktest.BenchUncontended(b, newMutexLocker(b, c), get(c))
	})
}

func BenchmarkContended(b *testing.B) {
	eps := etcdenv.Endpoints()
	run := func(b *testing.B, mk func(testing.TB, *clientv3.Client) dlock.Locker) {
		// A client each, like processes.
		dlocktest.BenchContended(b, func(b *testing.B) dlock.Locker { return mk(b, etcdenv.Client(b, eps)) },
			get(etcdenv.Client(b, eps)))
	}
	b.Run("etcdlock", func(b *testing.B) {
		run(b, func(b testing.TB, c *clientv3.Client) dlock.Locker { return benchLocker(b, c) })
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		run(b, func(b testing.TB, c *clientv3.Client) dlock.Locker { return newMutexLocker(b, c) })
	})
}

func BenchmarkHerd(b *testing.B) {
	eps := etcdenv.Endpoints()
	run := func(b *testing.B, mk func(testing.TB, *clientv3.Client) dlock.Locker) {
		c := etcdenv.Client(b, eps) // one client: one connection, as a process would
		waiters := make([]dlock.Locker, 64)
		for i := range waiters {
			waiters[i] = mk(b, c)
		}
		dlocktest.BenchHerd(b, mk(b, c), waiters, messages(eps[0]))
	}
	b.Run("etcdlock", func(b *testing.B) {
		run(b, func(b testing.TB, c *clientv3.Client) dlock.Locker { return benchLocker(b, c) })
	})
	b.Run("concurrency.Mutex", func(b *testing.B) {
		run(b, func(b testing.TB, c *clientv3.Client) dlock.Locker { return newMutexLocker(b, c) })
	})
}

// metricsClient keeps no connection open between reads, so a test leaves
// no goroutine behind.
var metricsClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// messages counts the gRPC messages the etcd server at endpoint has
// received (grpc_server_msg_received_total, every method): unary
// requests and each message on a stream (a watch's create and cancel, a
// keep-alive).
func messages(endpoint string) dlocktest.Requests {
	return func(ctx context.Context) (int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+endpoint+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		resp, err := metricsClient.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var n float64
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "grpc_server_msg_received_total{") {
				continue
			}
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				return 0, fmt.Errorf("etcd metrics: %q: %w", line, err)
			}
			n += v
		}
		return int64(n), sc.Err()
	}
}

// 64 waiters queued on one name: each hand-off costs the server four
// messages, however many wait: the release, the next waiter's read of the
// key ahead of it, and its two watches' cancels.
func TestHerdFree(t *testing.T) {
	eps := etcdenv.Endpoints()
	c := etcdenv.Client(t, eps)
	waiters := make([]dlock.Locker, 64)
	for i := range waiters {
		waiters[i] = benchLocker(t, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	perHandOff := dlocktest.HerdRound(ctx, t, dlocktest.Name(t), benchLocker(t, c), waiters, messages(eps[0]), 0)
	t.Logf("%.2f server messages per hand-off with 64 waiters", perHandOff)
	if perHandOff > 4 {
		t.Errorf("%.2f server messages per hand-off with 64 waiters, want at most 4", perHandOff)
	}
}
