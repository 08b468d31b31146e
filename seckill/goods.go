package seckill

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// StockKeeper is a Strategy that keeps an item's stock in storage of its
// own instead of the goods row (Segmented: one row per segment). Reset
// and Count use it for such a strategy.
type StockKeeper interface {
	Strategy
	// PutStock stores stock units of goodsID in the strategy's storage,
	// in tx: Reset's transaction, which has already emptied it.
	PutStock(ctx context.Context, tx *sql.Tx, goodsID int64, stock int) error
	// StockLeft reads what is left of goodsID's stock.
	StockLeft(ctx context.Context, db *sql.DB, goodsID int64) (int, error)
}

// keeper is s's StockKeeper, if it is one (directly or as a registered
// strategy).
func keeper(s Strategy) (StockKeeper, bool) {
	if r, ok := s.(*Registered); ok {
		s = r.Strategy
	}
	k, ok := s.(StockKeeper)
	return k, ok
}

// Reset puts goodsID on sale with stock units for strategy s: it removes
// the item's orders and every strategy's stock of it, and sets its stock,
// version and fence afresh, in the goods row or, when s is a
// StockKeeper, in s's own storage. s may be nil (the goods row). ctx
// governs the transaction.
func Reset(ctx context.Context, db *sql.DB, s Strategy, goodsID int64, stock int) error {
	if stock <= 0 {
		return fmt.Errorf("seckill: stock must be positive, got %d", stock)
	}
	st, err := newStore(db)
	if err != nil {
		return err
	}
	k, own := keeper(s)
	return st.inTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []string{st.q.deleteOrders, st.q.deleteSegments, st.q.deleteGoods} {
			if _, err := tx.ExecContext(ctx, q, goodsID); err != nil {
				return err
			}
		}
		rowStock := stock
		if own {
			rowStock = 0
		}
		if _, err := tx.ExecContext(ctx, st.q.insertGoods, goodsID, fmt.Sprintf("item %d", goodsID), rowStock); err != nil {
			return err
		}
		if own {
			return k.PutStock(ctx, tx, goodsID, stock)
		}
		return nil
	})
}

// Tally is the state of a sale, read from the database.
type Tally struct {
	// Orders is the number of orders placed.
	Orders int
	// StockLeft is the stock the goods row (or the strategy's own
	// storage) shows.
	StockLeft int
	// Duplicates is the number of users with more than one order.
	Duplicates int
}

// Count reads the tally of goodsID's sale by strategy s (nil: the goods
// row holds the stock).
func Count(ctx context.Context, db *sql.DB, s Strategy, goodsID int64) (Tally, error) {
	st, err := newStore(db)
	if err != nil {
		return Tally{}, err
	}
	var t Tally
	for _, c := range []struct {
		q   string
		dst *int
	}{
		{st.q.countOrders, &t.Orders},
		{st.q.countDuplicates, &t.Duplicates},
	} {
		if err := db.QueryRowContext(ctx, c.q, goodsID).Scan(c.dst); err != nil {
			return Tally{}, err
		}
	}
	if k, own := keeper(s); own {
		t.StockLeft, err = k.StockLeft(ctx, db, goodsID)
	} else {
		err = db.QueryRowContext(ctx, st.q.stock, goodsID).Scan(&t.StockLeft)
	}
	if errors.Is(err, sql.ErrNoRows) {
		err = fmt.Errorf("seckill: goods %d is not on sale (Reset puts it on sale)", goodsID)
	}
	return t, err
}
