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
// request. A request the drawn bucket is short of is rebalanced: a
// transaction locks every bucket of the item, in bucket order, takes the
// units from the sum and spreads what is left evenly over the buckets, so
// a sale never ends with units stranded in buckets nobody drew (and the
// process's next batch draws again). Units go back to (Cancel, expiry)
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
	var total int64
	if err := tx.QueryRowContext(ctx, s.q.bucketsAvailable, r.SKU).Scan(&total); err != nil || total < n {
		return 0, false, err
	}
	rows, err := tx.QueryContext(ctx, s.q.bucketsForUpdate, r.SKU)
	if err != nil {
		return 0, false, err
	}
	var buckets []int
	var had []int64
	total = 0
	for rows.Next() {
		var b int
		var avail int64
		if err := rows.Scan(&b, &avail); err != nil {
			_ = rows.Close() // the Scan error is the one to report
			return 0, false, err
		}
		buckets, had = append(buckets, b), append(had, avail)
		total += avail
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil || total < n {
		return 0, false, err
	}
	for i, avail := range spread(total-n, len(buckets)) {
		var reserved int64
		if buckets[i] == drawn {
			reserved = n
		}
		if avail == had[i] && reserved == 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, s.q.bucketSet, s.q.bucketSetArgs(reserved, r.SKU, buckets[i], avail)...); err != nil {
			return 0, false, err
		}
	}
	return drawn, true, nil
}
