package inventory_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/dlockhq/dlock/inventory"
)

// bucketRows reads sku's buckets: the units available in each, and the
// sums of reserved and sold; it fails t on a negative count.
func bucketRows(t *testing.T, db *sql.DB, driver, sku string) (available []int64, reserved, sold int64) {
	t.Helper()
	q := "SELECT available, reserved, sold FROM inventory_buckets WHERE sku = $1 ORDER BY bucket"
	if driver == "mysql" {
		q = "SELECT available, reserved, sold FROM inventory_buckets WHERE sku = ? ORDER BY bucket"
	}
	rows, err := db.Query(q, sku)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var a, r, s int64
		if err := rows.Scan(&a, &r, &s); err != nil {
			t.Fatal(err)
		}
		if a < 0 || r < 0 || s < 0 {
			t.Errorf("bucket of %q: available %d, reserved %d, sold %d", sku, a, r, s)
		}
		available = append(available, a)
		reserved += r
		sold += s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return available, reserved, sold
}

// TestBucketsRebalance: a request for more units than any bucket holds
// is served from the sum, and the units left are spread evenly; buyers
// drawing buckets at random sell the item out with nothing stranded; a
// Store of another strategy reserves the bucketed item from its buckets,
// and units go back to and are sold from the bucket they came from.
func TestBucketsRebalance(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := database(t, driver)
			ctx := ctxT(t)
			s := store(t, db, inventory.WithStrategy(inventory.Buckets), inventory.WithBuckets(8))
			if err := s.AddItem(ctx, "b", 40, 0); err != nil {
				t.Fatal(err)
			}
			if avail, _, _ := bucketRows(t, db, driver, "b"); len(avail) != 8 || avail[0] != 5 || avail[7] != 5 {
				t.Fatalf("buckets %v, want 8 of 5", avail)
			}
			big, err := s.Reserve(ctx, "big", 1, "b", 30)
			if err != nil || big.State != inventory.Reserved {
				t.Fatalf("30 of 40 units over 8 buckets of 5: %+v, %v", big, err)
			}
			avail, reserved, _ := bucketRows(t, db, driver, "b")
			if lo, hi := minMax(avail); lo != 1 || hi != 2 || reserved != 30 {
				t.Errorf("after the rebalance: buckets %v, %d reserved; want the 10 left spread 1–2 a bucket, 30 reserved", avail, reserved)
			}
			if got := buy(t, s, "b", 100, 130); got != 10 {
				t.Errorf("%d of 30 buyers got the 10 units left", got)
			}
			it, err := s.Item(ctx, "b")
			if err != nil {
				t.Fatal(err)
			}
			balanced(t, it)
			if it.Available != 0 || it.Reserved != 40 || it.Buckets != 8 {
				t.Errorf("item %+v, want sold out, 40 reserved, 8 buckets", it)
			}
			other := store(t, db) // combining
			if _, err := other.Cancel(ctx, big.ID); err != nil {
				t.Fatal(err)
			}
			alone := store(t, db, inventory.WithStrategy(inventory.Atomic))
			res, err := alone.Reserve(ctx, "other", 2, "b", 24)
			if err != nil || res.State != inventory.Reserved {
				t.Fatalf("an atomic Store reserving the bucketed item: %+v, %v", res, err)
			}
			if _, err := other.Confirm(ctx, res.ID); err != nil {
				t.Fatal(err)
			}
			res, err = other.Reserve(ctx, "other-1", 4, "b", 1)
			if err != nil || res.State != inventory.Reserved {
				t.Fatalf("a combining Store reserving the bucketed item: %+v, %v", res, err)
			}
			if _, err := other.Confirm(ctx, res.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := other.Reserve(ctx, "over", 3, "b", 6); !errors.Is(err, inventory.ErrSoldOut) {
				t.Errorf("6 of the 5 left: %v, want ErrSoldOut", err)
			}
			it, err = s.Item(ctx, "b")
			if err != nil {
				t.Fatal(err)
			}
			balanced(t, it)
			avail, reserved, sold := bucketRows(t, db, driver, "b")
			if it.Available != 5 || it.Reserved != 10 || it.Sold != 25 || sum(avail) != 5 || reserved != 10 || sold != 25 {
				t.Errorf("item %+v, buckets %v reserved %d sold %d; want 5 available, 10 reserved, 25 sold", it, avail, reserved, sold)
			}

			empty := store(t, db, inventory.WithStrategy(inventory.Buckets))
			if err := empty.AddItem(ctx, "none", 0, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := empty.Reserve(context.Background(), "none-1", 1, "none", 1); !errors.Is(err, inventory.ErrSoldOut) {
				t.Errorf("an item of 0 units: %v, want ErrSoldOut", err)
			}
		})
	}
}

func minMax(v []int64) (lo, hi int64) {
	lo, hi = v[0], v[0]
	for _, x := range v {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

func sum(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}

// TestMigrations: the migrations go down and up again, on both
// databases, and the tables work after.
func TestMigrations(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			db := database(t, driver)
			ctx := ctxT(t)
			if err := inventory.MigrateDown(ctx, db); err != nil {
				t.Fatalf("down: %v", err)
			}
			if _, err := db.Exec("SELECT 1 FROM inventory_items"); err == nil {
				t.Fatal("inventory_items is there after down")
			}
			if err := inventory.Migrate(ctx, db); err != nil {
				t.Fatalf("up again: %v", err)
			}
			s := store(t, db, inventory.WithStrategy(inventory.Buckets))
			if err := s.AddItem(ctx, "m", 3, 0); err != nil {
				t.Fatal(err)
			}
			if res, err := s.Reserve(ctx, "m1", 1, "m", 3); err != nil || res.State != inventory.Reserved {
				t.Errorf("reserve after up again: %+v, %v", res, err)
			}
		})
	}
}
