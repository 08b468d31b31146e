package seckill

import (
	"context"
	"database/sql"
	"fmt"
)

// Reset puts goodsID on sale with stock units: it removes the item's
// orders and segments, sets its stock, version and fence afresh, and
// splits the stock over segments rows for Segmented (0 for none). ctx
// governs the transaction.
func Reset(ctx context.Context, db *sql.DB, goodsID int64, stock, segments int) error {
	if stock <= 0 {
		return fmt.Errorf("seckill: stock must be positive, got %d", stock)
	}
	if segments < 0 {
		return fmt.Errorf("seckill: segments must not be negative, got %d", segments)
	}
	s, err := newStore(db)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{
			"DELETE FROM seckill_orders WHERE goods_id = $1",
			"DELETE FROM seckill_segments WHERE goods_id = $1",
			"DELETE FROM seckill_goods WHERE id = $1",
		} {
			if _, err := tx.ExecContext(ctx, s.q(q), goodsID); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, s.q("INSERT INTO seckill_goods (id, name, stock) VALUES ($1, $2, $3)"),
			goodsID, fmt.Sprintf("item %d", goodsID), stock); err != nil {
			return err
		}
		for seg := range segments {
			n := stock / segments
			if seg < stock%segments {
				n++
			}
			if _, err := tx.ExecContext(ctx, s.q("INSERT INTO seckill_segments (goods_id, segment, stock) VALUES ($1, $2, $3)"),
				goodsID, seg, n); err != nil {
				return err
			}
		}
		return nil
	})
}

// Tally is the state of a sale, read from the database.
type Tally struct {
	// Orders is the number of orders placed.
	Orders int
	// StockLeft is the stock the goods row (or its segments) shows.
	StockLeft int
	// Duplicates is the number of users with more than one order.
	Duplicates int
}

// Count reads the sale's tally. segmented says the stock lives in the
// segment rows.
func Count(ctx context.Context, db *sql.DB, goodsID int64, segmented bool) (Tally, error) {
	s, err := newStore(db)
	if err != nil {
		return Tally{}, err
	}
	var t Tally
	stockQ := "SELECT stock FROM seckill_goods WHERE id = $1"
	if segmented {
		stockQ = "SELECT COALESCE(SUM(stock), 0) FROM seckill_segments WHERE goods_id = $1"
	}
	for _, c := range []struct {
		q   string
		dst *int
	}{
		{"SELECT count(*) FROM seckill_orders WHERE goods_id = $1", &t.Orders},
		{stockQ, &t.StockLeft},
		{"SELECT count(*) FROM (SELECT user_id FROM seckill_orders WHERE goods_id = $1 GROUP BY user_id HAVING count(*) > 1) d", &t.Duplicates},
	} {
		if err := db.QueryRowContext(ctx, s.q(c.q), goodsID).Scan(c.dst); err != nil {
			return Tally{}, err
		}
	}
	return t, nil
}
