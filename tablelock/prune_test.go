package tablelock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/tablelock"
)

// Prune deletes free rows only, and a pruned name that comes back still
// gets a larger token.
func TestPrune(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			ctx := context.Background()
			l := newLocker(t, db)
			free, held := dlocktest.Name(t)+".free", dlocktest.Name(t)+".held"
			first, err := l.Lock(ctx, free)
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			holding, err := l.Lock(ctx, held)
			if err != nil {
				t.Fatal(err)
			}
			defer holding.Unlock(ctx)

			if n, err := tablelock.Prune(ctx, db, time.Hour); err != nil {
				t.Fatal(err)
			} else if !rowExists(t, db, free) {
				t.Fatalf("Prune with an hour's idle time deleted a row locked just now (%d rows)", n)
			}
			if _, err := tablelock.Prune(ctx, db, 0); err != nil {
				t.Fatal(err)
			}
			if !rowExists(t, db, free) {
				t.Fatalf("Prune deleted a row acquired less than MinPruneIdle (%v) ago", tablelock.MinPruneIdle)
			}
			age(t, db, free, tablelock.MinPruneIdle+time.Second)
			if _, err := tablelock.Prune(ctx, db, 0); err != nil {
				t.Fatal(err)
			}
			if rowExists(t, db, free) {
				t.Fatal("the free row survived Prune")
			}
			if !rowExists(t, db, held) {
				t.Fatal("Prune deleted a held row")
			}
			if err := holding.Refresh(ctx); err != nil {
				t.Fatalf("the held lease after Prune: %v", err)
			}
			again, err := l.Lock(ctx, free)
			if err != nil {
				t.Fatal(err)
			}
			defer again.Unlock(ctx)
			if again.Token() <= first.Token() {
				t.Fatalf("token %d after pruning, was %d", again.Token(), first.Token())
			}
			if _, err := tablelock.Prune(ctx, db, -time.Second); err == nil {
				t.Error("negative idle time accepted")
			}
			if _, err := tablelock.Prune(ctx, nil, 0); err == nil {
				t.Error("nil db accepted")
			}
		})
	}
}

// age moves a row's last acquisition d into the past, as if the name
// had been idle that long.
func age(t *testing.T, db *sql.DB, name string, d time.Duration) {
	t.Helper()
	q := "UPDATE dlock_locks SET acquired_at = acquired_at - INTERVAL ? MICROSECOND WHERE name = ?"
	if _, ok := db.Driver().(*stdlib.Driver); ok {
		q = "UPDATE dlock_locks SET acquired_at = acquired_at - $1 * interval '1 microsecond' WHERE name = $2"
	}
	if _, err := db.ExecContext(context.Background(), q, d.Microseconds(), name); err != nil {
		t.Fatal(err)
	}
}

func rowExists(t *testing.T, db *sql.DB, name string) bool {
	placeholder := "?"
	if _, ok := db.Driver().(*stdlib.Driver); ok {
		placeholder = "$1"
	}
	t.Helper()
	var n int
	err := db.QueryRowContext(context.Background(), "SELECT count(*) FROM dlock_locks WHERE name = "+placeholder, name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// A token past what the driver reads as int64 (2^63-1) is a clear error,
// and the failed Lock leaves nothing held: the next owner gets the lock
// once the row is repaired, without waiting for a TTL.
func TestTokenLimit(t *testing.T) {
	db := migrated(t, testenv.MySQL)
	ctx := context.Background()
	name := dlocktest.Name(t)
	if _, err := db.ExecContext(ctx, "INSERT INTO dlock_locks (name, token) VALUES (?, 9223372036854775807)", name); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, db, dlock.WithTTL(time.Minute))
	if _, err := l.TryLock(ctx, name); err == nil || !strings.Contains(err.Error(), "2^63-1") {
		t.Fatalf("TryLock past the token limit: %v", err)
	}
	var owner sql.NullString
	if err := db.QueryRowContext(ctx, "SELECT owner FROM dlock_locks WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)", name).Scan(&owner); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("the failed TryLock left the row held by %v (%v)", owner, err)
	}
}

// Without dlock's tables, the error is ErrSchema and says which
// migrations to apply.
func TestMissingSchemaSaysWhatToDo(t *testing.T) {
	testenv.Postgres(t) // skips or fails uniformly when the server is missing
	if _, err := testenv.MySQL(t).ExecContext(context.Background(), "CREATE DATABASE IF NOT EXISTS dlock_empty"); err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(testenv.DSN("mysql"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = "dlock_empty"
	for driver, dsn := range map[string]string{
		"pgx":   testenv.DSN("pgx") + "&search_path=dlock_nowhere",
		"mysql": cfg.FormatDSN(),
	} {
		db, err := sql.Open(driver, dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		l := newLocker(t, db)
		_, err = l.TryLock(context.Background(), dlocktest.Name(t))
		if err == nil || !strings.Contains(err.Error(), "migrations") {
			t.Errorf("%s: TryLock without the schema: %v", driver, err)
		}
		if !errors.Is(err, tablelock.ErrSchema) {
			t.Errorf("%s: %v is no ErrSchema", driver, err)
		}
	}
}

// Prune(ctx, db, 0) running in a loop beside holders that take and
// release a few names never lets a name's token go back: a name's
// successive holders see larger tokens, whatever Prune deleted between.
func TestPruneNeverRewindsTokens(t *testing.T) {
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			names := []string{dlocktest.Name(t) + ".a", dlocktest.Name(t) + ".b"}
			var (
				mu   sync.Mutex
				last = map[string]uint64{}
				errs = make(chan error, 16)
				wg   sync.WaitGroup
			)
			for w := range 4 {
				l := newLocker(t, db)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ctx.Err() == nil; i++ {
						name := names[(w+i)%len(names)]
						lease, err := l.Lock(ctx, name)
						if err != nil {
							if ctx.Err() == nil {
								errs <- err
							}
							return // ctx ended: the run is over
						}
						mu.Lock()
						if lease.Token() <= last[name] {
							errs <- fmt.Errorf("%s: token %d after %d", name, lease.Token(), last[name])
						}
						last[name] = lease.Token()
						mu.Unlock()
						_ = lease.Unlock(context.Background())
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					if _, err := tablelock.Prune(ctx, db, 0); err != nil && ctx.Err() == nil {
						errs <- err
						return
					}
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if len(last) == 0 {
				t.Fatal("no hold was taken")
			}
		})
	}
}
