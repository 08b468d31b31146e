package advisory_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/testenv"
)

// heldAdvisory says whether a session holds name's advisory lock on the
// server, seen past any pooler. Bigint keys show in pg_locks as classid
// (high 32 bits), objid (low 32 bits) and objsubid 1.
func heldAdvisory(t *testing.T, name string) bool {
	t.Helper()
	key := uint64(advisory.PostgresKey(name))
	var held bool
	err := testenv.Postgres(t).QueryRowContext(context.Background(),
		"SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND classid = $1 AND objid = $2)",
		int64(key>>32), int64(key&0xffffffff)).Scan(&held)
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// Through PgBouncer, in every pool mode and pgx query mode, a session
// lock is refused before anything is taken, with one line that says why
// and what to use instead (in pgx's default mode, which prepares named
// statements, every lock is); LockTx works where transactions do.
func TestPoolerRefusesSessionLocks(t *testing.T) {
	// The check sees a hold taken directly.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := newLocker(t, testenv.Postgres(t)).Lock(ctx, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !heldAdvisory(t, t.Name()) {
		t.Fatal("heldAdvisory does not see a direct hold")
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for pooling := range testenv.PgBouncerPorts {
		for _, mode := range []string{"", "exec", "simple_protocol"} {
			t.Run(pooling+"/"+mode, func(t *testing.T) {
				db := testenv.Open(t, "pgx", testenv.PgBouncerDSN(t, pooling, mode))
				l := newLocker(t, db)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				want, advice := advisory.ErrPooler, "LockTx"
				if mode == "" {
					want, advice = sqldialect.ErrPooledStatements, "default_query_exec_mode=exec"
				}
				for _, lock := range []func(context.Context, string) (dlock.Lease, error){l.TryLock, l.Lock} {
					lease, err := lock(ctx, t.Name())
					if err == nil {
						lease.Unlock(ctx)
						t.Fatal("a session lock was granted through a pooler")
					}
					if !errors.Is(err, want) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), advice) {
						t.Fatalf("want one line wrapping %v that names %s, got %v", want, advice, err)
					}
				}
				if heldAdvisory(t, t.Name()) {
					t.Fatal("the lock is held on the server after the refusals")
				}
				if pooling == "statement" {
					return // no transactions there: PgBouncer refuses them itself
				}
				if mode == "" {
					return // LockTx refuses as well: see TestPoolerRefusesNamedStatements
				}
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Rollback()
				if _, err := l.LockTx(ctx, tx, t.Name()); err != nil {
					t.Fatalf("LockTx through %s pooling: %v", pooling, err)
				}
			})
		}
	}
}

// With WithSessionPooling, session pooling keeps each holder on its own
// server session: two Lockers exclude each other, and a wait ends when
// its ctx does (the session's id is asked of the server, the one the
// connection was given being the pooler's).
func TestSessionPooling(t *testing.T) {
	db := testenv.Open(t, "pgx", testenv.PgBouncerDSN(t, "session", "exec"))
	migrated(t, func(testing.TB) *sql.DB { return db })
	a, b := newLocker(t, db, advisory.WithSessionPooling()), newLocker(t, db, advisory.WithSessionPooling())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	name := t.Name()
	var inside atomic.Int32
	done := make(chan error, 2)
	for _, l := range []*advisory.Locker{a, b} {
		go func() {
			for range 20 {
				lease, err := l.Lock(ctx, name)
				if err != nil {
					done <- err
					return
				}
				if inside.Add(1) != 1 {
					done <- errors.New("two holders at once")
					return
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := lease.Unlock(ctx); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	lease, err := a.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer wcancel()
	start := time.Now()
	if _, err := b.Lock(wctx, name); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait on a held lock: %v", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the wait outlasted its ctx by %v", waited-300*time.Millisecond)
	}
}

// pgx's default mode prepares named statements, which a pooler hands to
// other server sessions: LockTx says so in one line instead of failing
// at random.
func TestPoolerRefusesNamedStatements(t *testing.T) {
	db := testenv.Open(t, "pgx", testenv.PgBouncerDSN(t, "transaction", ""))
	l := newLocker(t, db)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	_, err = l.LockTx(ctx, tx, t.Name())
	if !errors.Is(err, sqldialect.ErrPooledStatements) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "default_query_exec_mode=exec") {
		t.Fatalf("LockTx through a pooler with named statements: want one line that names default_query_exec_mode=exec, got %v", err)
	}
}

// lib/pq does not show the process id it was given: through transaction
// and statement pooling, a second connection that finds the first one's
// session setting tells the pooler, and session locks are refused; in
// session pooling and directly they are taken.
func TestPoolerRefusesWithAnotherDriver(t *testing.T) {
	for pooling, refused := range map[string]bool{"transaction": true, "statement": true, "session": false, "": false} {
		t.Run(pooling, func(t *testing.T) {
			dsn := testenv.DSN("pgx")
			if pooling != "" {
				// Database postgres: a PgBouncer pool no other test
				// shares, so the probe's second connection gets the
				// session the first just freed.
				u, err := url.Parse(testenv.PgBouncerDSN(t, pooling, ""))
				if err != nil {
					t.Fatal(err)
				}
				u.Path = "/postgres"
				dsn = u.String()
			}
			db := testenv.Open(t, "postgres", dsn) // lib/pq
			l := newLocker(t, db)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			lease, err := l.TryLock(ctx, t.Name())
			if refused {
				if err == nil {
					lease.Unlock(ctx)
					t.Fatal("a session lock was granted through a pooler that shares sessions")
				}
				if !errors.Is(err, advisory.ErrPooler) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("want one line wrapping ErrPooler, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%q pooling with lib/pq: %v", pooling, err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
