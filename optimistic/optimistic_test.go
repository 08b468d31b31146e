package optimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/optimistic"
)

var drivers = append([]string{"pgx", "mysql"}, testenv.PGDrivers...)

// goods makes goods(id, name, stock, version) with one row in a database
// of the test's own.
func goods(t *testing.T, driver string, stock int) (*sql.DB, *optimistic.Table) {
	t.Helper()
	return goodsIn(t, testenv.Fresh(t, driver), driver, stock)
}

// goodsIn is goods in db, a database or schema of the test's own.
func goodsIn(t *testing.T, db *sql.DB, driver string, stock int) (*sql.DB, *optimistic.Table) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE goods (id int PRIMARY KEY, name varchar(20) NOT NULL, stock int NOT NULL, version bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, insert(driver), stock); err != nil {
		t.Fatal(err)
	}
	tbl, err := optimistic.NewTable(db, "goods", "id", "version")
	if err != nil {
		t.Fatal(err)
	}
	return db, tbl
}

func insert(driver string) string {
	if driver == "mysql" {
		return "INSERT INTO goods VALUES (1, 'A', ?, 1)"
	}
	return "INSERT INTO goods VALUES (1, 'A', $1, 1)"
}

// A value goes A → B → A while a stale writer holds version 1: its update
// fails, though the value it read is back.
func TestABA(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db, tbl := goods(t, driver, 10)
			ctx := context.Background()
			var staleName string
			stale, err := tbl.Get(ctx, db, 1, []string{"name"}, &staleName)
			if err != nil || stale != 1 || staleName != "A" {
				t.Fatalf("Get = %d %q %v", stale, staleName, err)
			}
			v := stale
			for _, name := range []string{"B", "A"} {
				if v, err = tbl.Update(ctx, db, 1, v, map[string]any{"name": name}); err != nil {
					t.Fatal(err)
				}
			}
			_, err = tbl.Update(ctx, db, 1, stale, map[string]any{"name": "C"})
			if !errors.Is(err, optimistic.ErrConflict) {
				t.Fatalf("stale update after A → B → A: %v, want ErrConflict", err)
			}
			var name string
			if now, err := tbl.Get(ctx, db, 1, []string{"name"}, &name); err != nil || now != 3 || name != "A" {
				t.Fatalf("row = %q at version %d (err %v), want A at 3", name, now, err)
			}
		})
	}
}

// Setting a column to the value it already has still counts as an update
// (MySQL reports changed rows, but the version always changes).
func TestSameValueUpdate(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db, tbl := goods(t, driver, 10)
			if v, err := tbl.Update(context.Background(), db, 1, 1, map[string]any{"stock": 10}); err != nil || v != 2 {
				t.Fatalf("same-value update = %d, %v; want version 2", v, err)
			}
		})
	}
}

// 16 goroutines take a stock of 100 down one at a time by CAS with retry:
// exactly 100 succeed, none is lost or doubled.
func TestContention(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db, tbl := goods(t, driver, 100)
			ctx := context.Background()
			var sold, conflicts atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := buyUntilSoldOut(ctx, tbl, db, &sold, &conflicts); err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			var stock int
			if _, err := tbl.Get(ctx, db, 1, []string{"stock"}, &stock); err != nil || stock != 0 {
				t.Fatalf("stock = %d (err %v), want 0", stock, err)
			}
			if sold.Load() != 100 {
				t.Fatalf("%d decrements succeeded, want exactly 100", sold.Load())
			}
			t.Logf("%d conflicts retried", conflicts.Load())
		})
	}
}

// buyUntilSoldOut takes a unit of row 1's stock, by version, again and
// again until none is left, counting the units it sold and the conflicts
// it retried.
func buyUntilSoldOut(ctx context.Context, tbl *optimistic.Table, db interface {
	optimistic.Querier
	optimistic.Execer
}, sold, conflicts *atomic.Int32) error {
	for {
		soldOut := false
		err := optimistic.Retry(ctx, optimistic.Policy{MaxAttempts: 1000}, func(ctx context.Context) error {
			var stock int
			v, err := tbl.Get(ctx, db, 1, []string{"stock"}, &stock)
			if err != nil {
				return err
			}
			if stock == 0 {
				soldOut = true
				return nil
			}
			_, err = tbl.Update(ctx, db, 1, v, map[string]any{"stock": stock - 1})
			if errors.Is(err, optimistic.ErrConflict) {
				conflicts.Add(1)
			}
			return err
		})
		if err != nil || soldOut {
			return err
		}
		sold.Add(1)
	}
}

// Update works inside a caller's transaction, and rolls back with it.
func TestInCallersTx(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db, tbl := goods(t, driver, 5)
			ctx := context.Background()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tbl.Update(ctx, tx, 1, 1, map[string]any{"stock": 4}); err != nil {
				t.Fatal(err)
			}
			tx.Rollback()
			var stock int
			if v, err := tbl.Get(ctx, db, 1, []string{"stock"}, &stock); err != nil || v != 1 || stock != 5 {
				t.Fatalf("after rollback: stock %d version %d (err %v)", stock, v, err)
			}
		})
	}
}

func TestRetryGivesUp(t *testing.T) {
	n := 0
	err := optimistic.Retry(context.Background(), optimistic.Policy{MaxAttempts: 3}, func(context.Context) error {
		n++
		return optimistic.ErrConflict
	})
	if !errors.Is(err, optimistic.ErrConflict) || n != 3 {
		t.Fatalf("Retry = %v after %d attempts, want ErrConflict after 3", err, n)
	}
}

// The zero Policy is the default one, not an invalid one.
func TestZeroPolicyIsDefault(t *testing.T) {
	n := 0
	err := optimistic.Retry(context.Background(), optimistic.Policy{Backoff: func(int) time.Duration { return 0 }}, func(context.Context) error {
		n++
		return optimistic.ErrConflict
	})
	if !errors.Is(err, optimistic.ErrConflict) || n != optimistic.DefaultMaxAttempts {
		t.Fatalf("Retry with Policy{} = %v after %d attempts, want ErrConflict after %d", err, n, optimistic.DefaultMaxAttempts)
	}
}

func TestBadInput(t *testing.T) {
	unreachable, _ := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	defer unreachable.Close()
	for _, ids := range [][3]string{
		{"", "id", "version"}, {"goods", "", "version"}, {"goods", "id", ""},
		{"goods; DROP TABLE x", "id", "version"}, {"goods", "id\"", "version"}, {"1goods", "id", "version"},
		{"goods", "id", "id"},
	} {
		if _, err := optimistic.NewTable(unreachable, ids[0], ids[1], ids[2]); err == nil {
			t.Errorf("NewTable(%q) accepted", ids)
		}
	}
	tbl, err := optimistic.NewTable(unreachable, "goods", "id", "version")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for what, set := range map[string]map[string]any{
		"nothing": {}, "bad column": {"stock = 0, x": 1}, "version column": {"version": 9},
	} {
		if _, err := tbl.Update(ctx, unreachable, 1, 1, set); err == nil || errors.Is(err, optimistic.ErrConflict) {
			t.Errorf("Update with %s: %v, want a validation error", what, err)
		}
	}
	if err := optimistic.Retry(ctx, optimistic.Policy{MaxAttempts: -1}, func(context.Context) error { return nil }); err == nil {
		t.Error("Retry with negative attempts accepted")
	}
	if err := optimistic.Retry(ctx, optimistic.DefaultPolicy, nil); err == nil {
		t.Error("Retry with nil fn accepted")
	}
}
