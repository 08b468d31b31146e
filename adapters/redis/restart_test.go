package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/schedlock"
)

// A server that restarts empty (no persistence), or from a snapshot taken
// before the holder's grant (RDB, Redis's default, with the name's
// fencing counter from an earlier hold), forgets the holder's lock; the
// holder only learns it at its next renewal. Until the server has been up
// for a TTL it grants nothing, so every successor comes after the
// holder's Done closed (the lease rule), and tokens still increase.
func TestRestartHoldsGrantsBack(t *testing.T) {
	t.Run("empty", func(t *testing.T) { restartHoldsGrantsBack(t, false) })
	t.Run("snapshot", func(t *testing.T) { restartHoldsGrantsBack(t, true) })
}

// restartHoldsGrantsBack restarts a server under a holder: empty, or
// from a snapshot saved after an earlier hold of the name.
func restartHoldsGrantsBack(t *testing.T, snapshot bool) {
	restart := (*testenv.RedisServer).Restart
	if snapshot {
		restart = (*testenv.RedisServer).RestartFromSnapshot
	}
	// The server holds grants back while it has been up for less than
	// ttl, counted from its start, snapshot loading included: ttl leaves
	// room for the restart and the client's reconnection on a busy
	// machine before the TryLock that must be refused.
	const ttl = 4 * time.Second
	kinds := map[string]func(t *testing.T, c *testenv.RedisServer) dlock.Locker{
		"lock": func(t *testing.T, s *testenv.RedisServer) dlock.Locker {
			return newLocker(t, client(t, s.Addr), dlock.WithTTL(ttl))
		},
		"fair": func(t *testing.T, s *testenv.RedisServer) dlock.Locker {
			return newFair(t, client(t, s.Addr), dlock.WithTTL(ttl))
		},
		"write": func(t *testing.T, s *testenv.RedisServer) dlock.Locker {
			rw, err := redislock.NewReadWrite(client(t, s.Addr), dlock.WithTTL(ttl))
			if err != nil {
				t.Fatal(err)
			}
			testenv.Closing(t, rw.Read)
			return testenv.Closing(t, rw.Write)
		},
	}
	for kind, newLocker := range kinds {
		t.Run(kind, func(t *testing.T) {
			server := testenv.RedisServers(t, 1)[0]
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			name := dlocktest.Name(t)
			holder, next := newLocker(t, server), newLocker(t, server)
			if snapshot {
				// An earlier hold leaves the name's fencing counter in
				// the snapshot; the next hold is not in it.
				earlier, err := holder.Lock(ctx, name) // a fresh server: held back up to a TTL
				if err != nil {
					t.Fatal(err)
				}
				if err := earlier.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				server.Save(t)
			}
			lease, err := holder.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			restart(server, t)
			restarted := time.Now()
			// Tries refused do not let a later one in early: every try
			// until the server could have been up for a TTL is refused.
			for time.Since(restarted) < ttl/2 {
				if _, err := next.TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
					t.Fatalf("TryLock %v after the restart: %v, want ErrNotAcquired", time.Since(restarted), err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			succ, err := next.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer succ.Unlock(ctx)
			select {
			case <-lease.Done():
			default:
				t.Fatal("a successor was granted while the holder's Done was still open")
			}
			if !errors.Is(lease.Err(), dlock.ErrLost) {
				t.Errorf("the holder's lease ended with %v, want ErrLost", lease.Err())
			}
			if succ.Token() <= lease.Token() {
				t.Errorf("successor's token %d is not above the holder's %d", succ.Token(), lease.Token())
			}
		})
	}
	t.Run("semaphore", func(t *testing.T) {
		server := testenv.RedisServers(t, 1)[0]
		ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
		defer cancel()
		sem, err := redislock.NewSemaphore(client(t, server.Addr), dlocktest.Name(t), 1, dlock.WithTTL(ttl))
		if err != nil {
			t.Fatal(err)
		}
		defer sem.Close()
		if snapshot {
			p, err := sem.Acquire(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Release(ctx); err != nil {
				t.Fatal(err)
			}
			server.Save(t)
		}
		if _, err := sem.Acquire(ctx, 1); err != nil {
			t.Fatal(err)
		}
		restart(server, t)
		restarted := time.Now()
		for time.Since(restarted) < ttl/2 {
			if _, err := sem.TryAcquire(ctx, 1); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("TryAcquire of the only permit %v after the restart: %v, want ErrNotAcquired", time.Since(restarted), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// After a restart, a name nobody holds is refused with ErrHeldBack, which
// says the server restarted and when it grants again, never that an
// owner holds it; Lock waits for it, and one whose ctx ends first says
// the same. WithRestartWindow bounds the wait for a long TTL.
func TestRestartHeldBackIsSaid(t *testing.T) {
	server := testenv.RedisServers(t, 1)[0]
	const window = 2 * time.Second
	c := client(t, server.Addr)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	long := newLocker(t, c, dlock.WithTTL(time.Hour), redislock.WithRestartWindow(window))
	plain := newLocker(t, c, dlock.WithTTL(window), dlock.WithMeterProvider(mp))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	server.Restart(t)
	restarted := time.Now()
	_, err := plain.TryLock(ctx, dlocktest.Name(t)+"/never-held")
	if !errors.Is(err, dlock.ErrHeldBack) || !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLock of a free name after a restart: %v, want ErrHeldBack and ErrNotAcquired", err)
	}
	if msg := err.Error(); strings.Contains(msg, "held by") || !strings.Contains(msg, "restarted") || !strings.Contains(msg, "grants the name again in") {
		t.Fatalf("TryLock after a restart says %q: want the restart and when grants resume, not a holder", msg)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	if !hasOutcome(rm, "held_back") {
		t.Errorf("no dlock.lock.acquisitions with dlock.outcome held_back after a held-back TryLock")
	}
	if h, held, err := plain.Inspect(ctx, dlocktest.Name(t)+"/never-held"); err != nil || held || h.HeldBack <= 0 || h.HeldBack > window+time.Second { // uptime is in whole seconds: up to one more
		t.Fatalf("Inspect of a free name during the hold-back: %+v held=%v err=%v, want HeldBack in (0, %v]", h, held, err, window+time.Second)
	}
	jobs, err := schedlock.New(plain)
	if err != nil {
		t.Fatal(err)
	}
	err = jobs.Run(ctx, dlocktest.Name(t)+"/job", func(context.Context, uint64) error { return nil }, time.Minute, 0)
	if !errors.Is(err, schedlock.ErrSkipped) || !errors.Is(err, dlock.ErrHeldBack) || strings.Contains(err.Error(), "another node") {
		t.Fatalf("a job after the restart: %v, want skipped for the hold-back, not for another node", err)
	}
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	if _, err := plain.Lock(short, dlocktest.Name(t)+"/short"); !errors.Is(err, dlock.ErrHeldBack) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock whose ctx ends during the hold-back: %v, want ErrHeldBack and the deadline", err)
	}
	// A 1 h TTL waits for the window, not an hour.
	lease, err := long.Lock(ctx, dlocktest.Name(t)+"/long")
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	if waited := time.Since(restarted); waited > window+2*time.Second {
		t.Fatalf("a 1h-TTL Lock with WithRestartWindow(%v) waited %v after the restart", window, waited)
	}
}

// A server that fsyncs every write (appendonly yes, appendfsync always)
// restarts with every lock it granted: it holds nothing back, and a
// holder's lock is still there.
func TestRestartOfADurableServerHoldsNothingBack(t *testing.T) {
	server := testenv.RedisServerWith(t, "--appendonly", "yes", "--appendfsync", "always")
	c := client(t, server.Addr)
	const ttl = 20 * time.Second
	holder, other := newLocker(t, c, dlock.WithTTL(ttl)), newLocker(t, c, dlock.WithTTL(ttl))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	lease, err := holder.Lock(ctx, name) // a fresh server holds back nothing either
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	server.Restart(t)
	if _, err := other.TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) || errors.Is(err, dlock.ErrHeldBack) {
		t.Fatalf("TryLock of a held name after the restart: %v, want held by its owner", err)
	}
	fresh, err := other.TryLock(ctx, name+"/fresh")
	if err != nil {
		t.Fatalf("TryLock of a free name right after a durable server's restart: %v", err)
	}
	fresh.Unlock(ctx)
	if err := lease.Refresh(ctx); err != nil {
		t.Fatalf("the holder's lease after the restart: %v", err)
	}
	if h, held, err := other.Inspect(ctx, name+"/free"); err != nil || held || h.HeldBack != 0 {
		t.Fatalf("Inspect of a free name on a durable server: %+v %v %v, want nothing held back", h, held, err)
	}
}

// WithRestartWindow is checked before any I/O.
func TestRestartWindowBadInput(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	if _, err := redislock.New(c, redislock.WithRestartWindow(time.Millisecond)); err == nil || !strings.Contains(err.Error(), "WithRestartWindow") {
		t.Fatalf("New with a 1ms window: %v", err)
	}
	if _, err := redislock.NewFair(c, redislock.WithRestartWindow(time.Second)); err == nil || !strings.Contains(err.Error(), "WithRestartWindow") {
		t.Fatalf("NewFair with a window: %v, want refused", err)
	}
}

// Redlock: when restarted servers hold back so many grants that no
// quorum can form, TryLock says ErrHeldBack, not a holder.
func TestRedlockRestartHeldBackIsSaid(t *testing.T) {
	servers := testenv.RedisServers(t, 3)
	r := redlockOver(t, servers, dlock.WithTTL(5*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	servers[0].Restart(t)
	servers[1].Restart(t)
	_, err := r.TryLock(ctx, dlocktest.Name(t))
	if !errors.Is(err, dlock.ErrHeldBack) || strings.Contains(err.Error(), "held by") {
		t.Fatalf("Redlock TryLock with 2 of 3 servers restarted: %v, want ErrHeldBack", err)
	}
}

// hasOutcome reports whether rm counts an acquisition of outcome.
func hasOutcome(rm metricdata.ResourceMetrics, outcome string) bool {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "dlock.lock.acquisitions" || !ok {
				continue
			}
			for _, p := range d.DataPoints {
				if v, ok := p.Attributes.Value("dlock.outcome"); ok && v.AsString() == outcome && p.Value > 0 {
					return true
				}
			}
		}
	}
	return false
}
