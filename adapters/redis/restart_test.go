package redislock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
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
