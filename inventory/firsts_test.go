package inventory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/inventory"
)

// A user's first two reservations, reaching two Stores of their own
// (processes, each with its own pool) at once, under every strategy on
// both databases: the per-user limit holds, though the user has no row
// of holdings yet to lock. The holdings are counted from the
// reservations themselves.
func TestPerUserLimitOfFirstReservations(t *testing.T) {
	const users, limit, qty = 100, 3, 2 // two requests of 2 exceed 3
	for _, driver := range []string{"pgx", "mysql"} {
		for _, st := range strategies {
			t.Run(driver+"/"+st.String(), func(t *testing.T) {
				ctx := ctxT(t)
				dsn := testenv.FreshDSN(t, driver)
				dbs := make([]*sql.DB, 4)
				for i := range dbs {
					dbs[i] = testenv.Open(t, driver, dsn)
					dbs[i].SetMaxOpenConns(8)
				}
				if err := inventory.Migrate(ctx, dbs[0]); err != nil {
					t.Fatal(err)
				}
				stores := make([]*inventory.Store, len(dbs))
				for i, db := range dbs {
					stores[i] = store(t, db, inventory.WithStrategy(st))
				}
				if err := stores[0].AddItem(ctx, "first", 1000, limit); err != nil {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				for u := range users {
					for i := range 2 {
						wg.Add(1)
						go func() {
							defer wg.Done()
							s := stores[(2*u+i)%len(stores)]
							_, err := s.ReserveRequest(ctx, inventory.Request{RequestID: fmt.Sprintf("u%d-%d", u, i), UserID: int64(u + 1), SKU: "first", Qty: qty})
							if err != nil && !errors.Is(err, inventory.ErrOverLimit) {
								t.Error(err)
							}
						}()
					}
				}
				wg.Wait()
				over := overLimit(ctx, t, dbs[0], driver, "first", limit)
				if len(over) > 0 {
					t.Fatalf("%d of %d users hold more than %d units: %v", len(over), users, limit, over)
				}
				var granted int
				if err := dbs[0].QueryRowContext(ctx, "SELECT count(*) FROM inventory_reservations WHERE state = 'reserved'").Scan(&granted); err != nil || granted != users {
					t.Fatalf("%d reservations granted (%v), want one per user", granted, err)
				}
			})
		}
	}
}

// overLimit returns the users whose live reservations of sku add up to
// more than limit, with what they hold.
func overLimit(ctx context.Context, t *testing.T, db *sql.DB, driver, sku string, limit int) map[int64]int64 {
	t.Helper()
	q := "SELECT user_id, sum(qty) FROM inventory_reservations WHERE sku = $1 AND state IN ('reserved', 'sold') GROUP BY user_id HAVING sum(qty) > $2"
	if driver == "mysql" {
		q = "SELECT user_id, sum(qty) FROM inventory_reservations WHERE sku = ? AND state IN ('reserved', 'sold') GROUP BY user_id HAVING sum(qty) > ?"
	}
	rows, err := db.QueryContext(ctx, q, sku, limit)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	over := map[int64]int64{}
	for rows.Next() {
		var u, n int64
		if err := rows.Scan(&u, &n); err != nil {
			t.Fatal(err)
		}
		over[u] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return over
}
