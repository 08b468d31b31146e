package inventory

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
)

// The buckets strategy splits an item's stock over K rows of
// inventory_buckets. Each process's combining batches for the item take
// from one bucket, drawn at random, locking that row alone: processes
// that would queue on the item's row lock each other out only when they
// draw the same bucket. The atomic strategy's Reserve draws a bucket per
// request. Requests the drawn bucket is short of are rebalanced (a
// batch's together): a transaction locks every bucket of the item, in
// bucket order, takes the units from the sum and spreads what is left
// evenly over the buckets, so a sale never ends with units stranded in
// buckets nobody drew (and the process's next batch draws again). Units go back to (Cancel, expiry)
// and are sold from (Confirm) the bucket they were reserved from.

// addBucketed adds a bucketed item: its row and its buckets, in one
// transaction.
func (s *Store) addBucketed(ctx context.Context, sku string, initial int64, perUserLimit int) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, s.q.insertBucketedItem, sku, initial, perUserLimit, s.buckets); err != nil {
		return err
	}
	args := make([]any, 0, 3*s.buckets)
	for b, n := range spread(initial, s.buckets) {
		args = append(args, sku, b+1, n)
	}
	if _, err := tx.ExecContext(ctx, s.q.insertBuckets(s.buckets), args...); err != nil {
		return err
	}
	return tx.Commit()
}

// spread splits n units over k buckets as evenly as can be.
func spread(n int64, k int) []int64 {
	out := make([]int64, k)
	for i := range out {
		out[i] = n / int64(k)
		if int64(i) < n%int64(k) {
			out[i]++
		}
	}
	return out
}

// reserveBucketed decides r alone on a bucketed item: from a bucket drawn
// at random, or, when it has too few units, after rebalancing.
func (s *Store) reserveBucketed(ctx context.Context, r Request, info itemInfo) (Reservation, error) {
	if res, found, err := s.byRequest(ctx, s.db, r); found || err != nil {
		return res, err
	}
	drawn := 1 + rand.IntN(info.buckets)
	take := func(ctx context.Context, tx *sql.Tx, r Request) (int, bool, error) {
		res, err := tx.ExecContext(ctx, s.q.bucketTake, s.q.bucketTakeArgs(int64(r.Qty), r.SKU, drawn)...)
		if err != nil {
			return 0, false, err
		}
		n, err := res.RowsAffected()
		return drawn, n == 1, err
	}
	reason, err := s.tryReserve(ctx, r, info.limit, take)
	if err == nil && reason == reasonSoldOut { // the drawn bucket's; a new transaction, so no lock is held
		rebalance := func(ctx context.Context, tx *sql.Tx, r Request) (int, bool, error) {
			return s.rebalance(ctx, tx, r, drawn)
		}
		reason, err = s.tryReserve(ctx, r, info.limit, rebalance)
	}
	return s.decided(ctx, r, reason, err)
}

// rebalance takes r's units from the sum of the item's buckets, locked in
// order, reserving them in bucket drawn, and spreads the units left over
// the buckets evenly. A sum read without locks that is short of r.Qty
// rejects r without locking anything.
func (s *Store) rebalance(ctx context.Context, tx *sql.Tx, r Request, drawn int) (int, bool, error) {
	n := int64(r.Qty)
	p, total, err := lockPool(ctx, tx, s.q, r.SKU, drawn, n)
	if err != nil || total < n {
		return 0, false, err
	}
	return drawn, true, p.write(ctx, tx, s.q, r.SKU, total-n, n)
}

// pool is an item's buckets, locked together for a rebalance.
type pool struct {
	buckets []int
	had     []int64 // each bucket's available units, as locked
	drawn   int     // the bucket the units granted are reserved in
}

// lockPool locks every bucket of sku, in bucket order, and returns them
// and the sum of their available units; unless a sum read first without
// locks is short of need, which it returns with no pool.
func lockPool(ctx context.Context, tx *sql.Tx, q *queries, sku string, drawn int, need int64) (*pool, int64, error) {
	var unlocked int64
	if err := tx.QueryRowContext(ctx, q.bucketsAvailable, sku).Scan(&unlocked); err != nil || unlocked < need {
		return nil, unlocked, err
	}
	rows, err := tx.QueryContext(ctx, q.bucketsForUpdate, sku)
	if err != nil {
		return nil, 0, err
	}
	p := &pool{drawn: drawn}
	var total int64
	for rows.Next() {
		var b int
		var avail int64
		if err := rows.Scan(&b, &avail); err != nil {
			_ = rows.Close() // the Scan error is the one to report
			return nil, 0, err
		}
		p.buckets, p.had = append(p.buckets, b), append(p.had, avail)
		total += avail
	}
	return p, total, errors.Join(rows.Err(), rows.Close())
}

// write spreads left units evenly over the pool's buckets and adds
// reserved units to the drawn bucket's reserved.
func (p *pool) write(ctx context.Context, tx *sql.Tx, q *queries, sku string, left, reserved int64) error {
	for i, avail := range spread(left, len(p.buckets)) {
		var add int64
		if p.buckets[i] == p.drawn {
			add = reserved
		}
		if avail == p.had[i] && add == 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, q.bucketSet, q.bucketSetArgs(add, sku, p.buckets[i], avail)...); err != nil {
			return err
		}
	}
	return nil
}
