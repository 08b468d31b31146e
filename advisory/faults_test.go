package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// With a pool of 2 and both connections pinned by held locks, TryLock on a
// third name fails at once with ErrPoolExhausted (it must not wait), and
// works again once a lock is released.
func TestPoolExhaustion(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			migrated(t, d.Open) // schema, through the shared pool
			db := d.Open(t)
			db.SetMaxOpenConns(2)
			l := newLocker(t, db)
			ctx := context.Background()
			a, err := l.Lock(ctx, dlocktest.Name(t)+"a")
			if err != nil {
				t.Fatal(err)
			}
			b, err := newLocker(t, db).Lock(ctx, dlocktest.Name(t)+"b")
			if err != nil {
				t.Fatal(err)
			}
			third := dlocktest.Name(t) + "c"
			if _, err := newLocker(t, db).TryLock(ctx, third); !errors.Is(err, advisory.ErrPoolExhausted) {
				t.Fatalf("TryLock with every connection pinned: %v, want ErrPoolExhausted", err)
			}
			// Lock waits for a connection as long as its ctx allows, and
			// then says the attempt was never sent.
			short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			_, err = newLocker(t, db).Lock(short, third)
			cancel()
			if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "was not tried") || !strings.Contains(err.Error(), "SetMaxOpenConns") {
				t.Fatalf("Lock with every connection pinned: %v, want ErrNotAcquired saying it was not tried and naming SetMaxOpenConns", err)
			}
			if err := a.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			c, err := newLocker(t, db).TryLock(ctx, third)
			if err != nil {
				t.Fatalf("TryLock after a release: %v", err)
			}
			c.Unlock(ctx)
			b.Unlock(ctx)
		})
	}
}

// Unlock runs on the session that locked: while the pool churns through
// other connections, unlocking still succeeds (pg_advisory_unlock and
// RELEASE_LOCK report false/0 on any other session, which Unlock turns
// into ErrNotHeld), and the name is free after.
func TestUnlockOnLockingSession(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			ctx := context.Background()
			name := dlocktest.Name(t)
			lease, err := newLocker(t, db).Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20 {
						db.ExecContext(ctx, "SELECT 1")
					}
				}()
			}
			wg.Wait()
			if err := lease.Unlock(ctx); err != nil {
				t.Fatalf("Unlock: %v", err)
			}
			if _, held, err := newLocker(t, db).Inspect(ctx, name); err != nil || held {
				t.Fatalf("after Unlock: held=%v err=%v", held, err)
			}
		})
	}
}

// Killing the holder's server session ends its lease with ErrLost (the
// next ping fails) and lets another owner in.
func TestKillHolderSession(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			ctx := context.Background()
			name := dlocktest.Name(t)
			holder := newLocker(t, db, dlock.WithTTL(time.Second))
			lease, err := holder.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			kill := "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1"
			arg := any(fmt.Sprintf("dlock %d %%", lease.Token()))
			if d.Name == "mysql" {
				var id int64
				if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", advisory.MySQLName(name)).Scan(&id); err != nil {
					t.Fatal(err)
				}
				kill, arg = fmt.Sprintf("KILL %d", id), nil
			}
			args := []any{}
			if arg != nil {
				args = append(args, arg)
			}
			if _, err := db.ExecContext(ctx, kill, args...); err != nil {
				t.Fatal(err)
			}
			select {
			case <-lease.Done():
			case <-time.After(dlocktest.Timeout):
				t.Fatal("Done stayed open after the holder's session was killed")
			}
			if err := lease.Err(); !errors.Is(err, dlock.ErrLost) {
				t.Fatalf("Err() = %v, want ErrLost", err)
			}
			next, err := newLocker(t, db).TryLock(ctx, name)
			if err != nil {
				t.Fatalf("another owner after the kill: %v", err)
			}
			if next.Token() <= lease.Token() {
				t.Fatalf("token %d after %d", next.Token(), lease.Token())
			}
			next.Unlock(ctx)
		})
	}
}

// Cancelling a waiting Lock cancels its statement on the server: no
// session is left waiting for the lock.
func TestCancelLeavesNoWaiter(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			name := dlocktest.Name(t)
			holder, err := newLocker(t, db).Lock(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Unlock(context.Background())
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			if _, err := newLocker(t, db).Lock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
				t.Fatalf("Lock = %v, want ErrNotAcquired", err)
			}
			dlocktest.Eventually(t, func() bool { return waiters(context.Background(), t, db, d.Name, name) == 0 }, "no session left waiting for the lock on the server")
		})
	}
}

func TestNames(t *testing.T) {
	if advisory.MySQLName("Case") == advisory.MySQLName("case") {
		t.Error("MySQL names differing in case share a lock")
	}
	if got := advisory.MySQLName("orders:42"); got != "dl:orders:42" {
		t.Errorf("MySQLName(orders:42) = %q, want it readable", got)
	}
	for _, n := range []string{strings.Repeat("x", 255), "Case", "锁", "a b"} {
		if m := advisory.MySQLName(n); len(m) > 64 {
			t.Errorf("MySQLName(%q) is %d characters, GET_LOCK takes 64", n, len(m))
		}
	}
	if advisory.PostgresKey("a") == advisory.PostgresKey("b") {
		t.Error("PostgresKey: a and b collide")
	}
}

// A Lock that gave up has ended its waiting session before it returns:
// a release right after it cannot grant the lock to that session, so a
// third owner takes the name at once. Raced many times, because the
// window (the session killed but still queued) is short.
func TestCancelledWaitEndsItsSession(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			holder, waiter, third := newLocker(t, db), newLocker(t, db), newLocker(t, db)
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			for i := range 100 {
				name := fmt.Sprintf("%s.%d", dlocktest.Name(t), i)
				lease, err := holder.Lock(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				wctx, wcancel := context.WithCancel(ctx)
				go func() {
					defer wcancel()
					for ctx.Err() == nil && waiters(ctx, t, db, d.Name, name) == 0 {
						time.Sleep(time.Millisecond)
					}
				}()
				if _, err := waiter.Lock(wctx, name); !errors.Is(err, context.Canceled) {
					t.Fatalf("Lock = %v, want context.Canceled", err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				got, err := third.TryLock(ctx, name)
				if err != nil {
					t.Fatalf("round %d: TryLock after the holder unlocked: %v", i, err)
				}
				if err := got.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A *sql.DB over a pgxpool (stdlib.OpenDBFromPool) sets no bound of its
// own: the pgxpool's is the one. With both of its 2 connections pinned by
// held locks, TryLock fails at once with ErrPoolExhausted instead of
// waiting out its ctx for a connection.
func TestPoolExhaustionOnPgxPool(t *testing.T) {
	migrated(t, testenv.Postgres)
	cfg, err := pgxpool.ParseConfig(testenv.DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the Lockers' Close, which gives their connections back
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The held locks are released by their Lockers' Close (newLocker).
	for i := range 2 {
		if _, err := newLocker(t, db).Lock(ctx, fmt.Sprintf("%s.%d", dlocktest.Name(t), i)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	_, err = newLocker(t, db).TryLock(ctx, dlocktest.Name(t)+".third")
	if !errors.Is(err, advisory.ErrPoolExhausted) {
		t.Fatalf("TryLock with the pgxpool's every connection pinned: %v, want ErrPoolExhausted", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("TryLock took %v to say the pool is exhausted", took)
	}
	// Lock waits for a connection as long as its ctx allows, then says
	// which bound to raise: the pgxpool's, not the *sql.DB's.
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	_, err = newLocker(t, db).Lock(short, dlocktest.Name(t)+".fourth")
	if !errors.Is(err, dlock.ErrNotAcquired) || !strings.Contains(err.Error(), "was not tried") || !strings.Contains(err.Error(), "MaxConns") || strings.Contains(err.Error(), "SetMaxOpenConns") {
		t.Fatalf("Lock with the pgxpool's every connection pinned: %v, want ErrNotAcquired saying it was not tried and naming the pgxpool's MaxConns", err)
	}
}
