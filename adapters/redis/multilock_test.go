package redislock_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Two callers take the same two locks, on two different Redis servers, in
// opposite orders, many times: MultiLock's canonical order means neither
// ever waits for the other forever.
func TestMultiLockNoDeadlock(t *testing.T) {
	servers := testenv.RedisServers(t, 2)
	x, y := dlocktest.Name(t)+"x", dlocktest.Name(t)+"y"
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	for i, order := range [][2]string{{x, y}, {y, x}} {
		// Fresh servers hold first grants back for one TTL: a short one.
		ttl := dlock.WithTTL(2 * time.Second)
		l0, l1 := newLocker(t, client(t, servers[0].Addr), ttl), newLocker(t, client(t, servers[1].Addr), ttl)
		locker := map[string]dlock.Locker{x: l0, y: l1}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				m, err := dlock.LockAll(ctx, dlock.Part{Locker: locker[order[0]], Name: order[0]}, dlock.Part{Locker: locker[order[1]], Name: order[1]})
				if err != nil {
					t.Errorf("caller %d: %v", i, err)
					return
				}
				if err := m.Unlock(ctx); err != nil {
					t.Errorf("caller %d: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
