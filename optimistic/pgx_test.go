package optimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/optimistic"
)

// On a pgx pool and in a pgx transaction, without database/sql: 20
// buyers each take one item through Retry, and the stock and version
// come out exact; a stale version is refused after A → B → A; a missing
// row is sql.ErrNoRows.
func TestPgxTable(t *testing.T) {
	pool := testenv.PgxPool(t)
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	table := fmt.Sprintf("pgx_goods_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (id int PRIMARY KEY, name text NOT NULL, stock int NOT NULL, version bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+table) })
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" VALUES (1, 'A', 100, 1)"); err != nil {
		t.Fatal(err)
	}
	tbl, err := optimistic.NewPgxTable(table, "id", "version")
	if err != nil {
		t.Fatal(err)
	}
	const buyers = 20
	var wg sync.WaitGroup
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := optimistic.Retry(ctx, optimistic.Policy{MaxAttempts: 1000}, func(ctx context.Context) error {
				var stock int
				v, err := tbl.GetPgx(ctx, pool, 1, []string{"stock"}, &stock)
				if err != nil {
					return err
				}
				_, err = tbl.UpdatePgx(ctx, pool, 1, v, map[string]any{"stock": stock - 1})
				return err
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var stock int
	v, err := tbl.GetPgx(ctx, pool, 1, []string{"stock"}, &stock)
	if err != nil || stock != 100-buyers || v != 1+buyers {
		t.Fatalf("stock %d at version %d (%v), want %d at %d", stock, v, err, 100-buyers, 1+buyers)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	stale := v
	for _, name := range []string{"B", "A"} {
		if v, err = tbl.UpdatePgx(ctx, tx, 1, v, map[string]any{"name": name}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tbl.UpdatePgx(ctx, tx, 1, stale, map[string]any{"name": "C"}); !errors.Is(err, optimistic.ErrConflict) {
		t.Fatalf("stale update after A → B → A in a pgx.Tx: %v, want ErrConflict", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var name string
	if now, err := tbl.GetPgx(ctx, pool, 1, []string{"name"}, &name); err != nil || name != "A" || now != v {
		t.Fatalf("row %q at version %d (%v), want A at %d", name, now, err, v)
	}
	if _, err := tbl.GetPgx(ctx, pool, 2, []string{"name"}, &name); !errors.Is(err, sql.ErrNoRows) || !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("GetPgx of a missing row: %v, want sql.ErrNoRows", err)
	}
	if _, err := optimistic.NewPgxTable("bad name", "id", "version"); err == nil {
		t.Fatal("NewPgxTable with a bad identifier: no error")
	}
}
