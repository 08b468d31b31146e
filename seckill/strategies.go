package seckill

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/optimistic"
	"github.com/dlockhq/dlock/pessimistic"
)

// None sells without any concurrency control: it reads the stock, then
// writes back what it read minus one. Concurrent buyers overwrite each
// other's decrements, so more orders are placed than there was stock.
// It exists to show that.
func None(db *sql.DB) (Strategy, error) {
	s, err := newStore(db)
	return none{s}, err
}

type none struct{ store }

func (none) Name() string { return "none" }

func (s none) PlaceOrder(ctx context.Context, userID, goodsID int64) (Order, error) {
	var stock int
	if err := s.db.QueryRowContext(ctx, s.q.stock, goodsID).Scan(&stock); err != nil {
		return Order{}, err
	}
	if stock <= 0 {
		return Order{}, ErrSoldOut
	}
	o, err := s.insertOrder(ctx, s.db, userID, goodsID)
	if err != nil {
		return Order{}, err
	}
	_, err = s.db.ExecContext(ctx, s.q.setStock, stock-1, goodsID)
	return o, err
}

// Atomic sells with one conditional UPDATE … SET stock = stock - 1 WHERE
// stock > 0 and the order insert in one transaction: the database's own
// row lock, held for the shortest time. It is the baseline.
func Atomic(db *sql.DB) (Strategy, error) {
	s, err := newStore(db)
	return atomicStrategy{s}, err
}

type atomicStrategy struct{ store }

func (atomicStrategy) Name() string { return "atomic" }

func (s atomicStrategy) PlaceOrder(ctx context.Context, userID, goodsID int64) (o Order, err error) {
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.q.decrementIfAny, goodsID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return ErrSoldOut
		}
		o, err = s.insertOrder(ctx, tx, userID, goodsID)
		return err
	})
	return o, err
}

// Pessimistic locks the goods row with SELECT … FOR UPDATE, checks the
// stock, decrements it and inserts the order, in a transaction retried on
// deadlock.
func Pessimistic(db *sql.DB) (Strategy, error) {
	s, err := newStore(db)
	return pessimisticStrategy{s}, err
}

type pessimisticStrategy struct{ store }

func (pessimisticStrategy) Name() string { return "pessimistic" }

func (s pessimisticStrategy) PlaceOrder(ctx context.Context, userID, goodsID int64) (o Order, err error) {
	clause := pessimistic.ForNoKeyUpdate.Postgres()
	if s.d == sqldialect.MySQL {
		clause = pessimistic.ForUpdate.MySQL()
	}
	err = pessimistic.Do(ctx, s.db, func(ctx context.Context, tx *sql.Tx) error {
		var stock int
		if err := tx.QueryRowContext(ctx, s.q.stock+" "+clause, goodsID).Scan(&stock); err != nil {
			return err
		}
		if stock <= 0 {
			return ErrSoldOut
		}
		if _, err := tx.ExecContext(ctx, s.q.decrement, goodsID); err != nil {
			return err
		}
		o, err = s.insertOrder(ctx, tx, userID, goodsID)
		return err
	})
	return o, err
}

// Optimistic reads the stock and version, then decrements by version
// compare-and-swap in the order's transaction, retrying on conflict.
func Optimistic(db *sql.DB) (Strategy, error) {
	s, err := newStore(db)
	if err != nil {
		return nil, err
	}
	t, err := optimistic.NewTable(db, "seckill_goods", "id", "version")
	return optimisticStrategy{s, t}, err
}

type optimisticStrategy struct {
	store
	goods *optimistic.Table
}

func (optimisticStrategy) Name() string { return "optimistic" }

// optimisticPolicy allows many attempts: under a flash sale most CAS
// attempts conflict, and giving up would leave stock unsold.
var optimisticPolicy = optimistic.Policy{MaxAttempts: 1000, Backoff: dlock.ExponentialBackoff(100*time.Microsecond, 20*time.Millisecond)}

func (s optimisticStrategy) PlaceOrder(ctx context.Context, userID, goodsID int64) (o Order, err error) {
	err = optimistic.Retry(ctx, optimisticPolicy, func(ctx context.Context) error {
		var stock int
		version, err := s.goods.Get(ctx, s.db, goodsID, []string{"stock"}, &stock)
		if err != nil {
			return err
		}
		if stock <= 0 {
			return ErrSoldOut
		}
		return s.inTx(ctx, func(tx *sql.Tx) error {
			if _, err := s.goods.Update(ctx, tx, goodsID, version, map[string]any{"stock": stock - 1}); err != nil {
				return err
			}
			o, err = s.insertOrder(ctx, tx, userID, goodsID)
			return err
		})
	})
	return o, err
}

// Option configures Locked and Segmented.
type Option func(*lockedConfig)

type lockedConfig struct {
	holdDelay time.Duration
}

// WithHoldDelay makes every purchase pause this long while holding the
// lock, before it writes: a stand-in for a GC pause or a slow call, to
// show that a holder whose lease expired meanwhile is refused by the
// fencing token. A delay of 0 or less makes no pause.
func WithHoldDelay(d time.Duration) Option { return func(c *lockedConfig) { c.holdDelay = d } }

// Locked sells while holding locker's lock on the item: it checks the
// stock, then decrements it and records the lease's fencing token in one
// UPDATE that also requires the row's fence not to be newer than the
// token (… AND fence <= token). A purchase whose lease expired, and whose
// lock another buyer then took, is refused with ErrStaleToken.
func Locked(db *sql.DB, name string, locker dlock.Locker, opts ...Option) (Strategy, error) {
	s, err := newStore(db)
	if err != nil {
		return nil, err
	}
	if locker == nil {
		return nil, errors.New("seckill: nil Locker")
	}
	var cfg lockedConfig
	for _, o := range opts {
		o(&cfg)
	}
	return lockedStrategy{store: s, name: name, locker: locker, cfg: cfg}, nil
}

type lockedStrategy struct {
	store
	name   string
	locker dlock.Locker
	cfg    lockedConfig
}

func (s lockedStrategy) Name() string { return s.name }

func lockName(goodsID int64) string { return "seckill:goods:" + strconv.FormatInt(goodsID, 10) }

func (s lockedStrategy) PlaceOrder(ctx context.Context, userID, goodsID int64) (o Order, err error) {
	lease, err := s.locker.Lock(ctx, lockName(goodsID))
	if err != nil {
		return Order{}, err
	}
	defer func() { err = unlock(ctx, lease, err) }()
	return s.buy(ctx, lease, s.cfg, userID, goodsID, purchase{
		read:     s.q.stock,
		readArgs: []any{goodsID},
		write:    s.q.fencedDecrement,
		key:      []any{goodsID},
	})
}

// unlock ends a purchase's lease; a lease lost meanwhile is not an error of
// the purchase (the fencing check already decided whether it wrote).
func unlock(ctx context.Context, lease dlock.Lease, err error) error {
	if uerr := lease.Unlock(context.WithoutCancel(ctx)); uerr != nil && err == nil && !errors.Is(uerr, dlock.ErrNotHeld) {
		return uerr
	}
	return err
}

// purchase is the SQL of one locked purchase: read the stock, then write
// with write's parameters (the token, then key, then the token again).
type purchase struct {
	read     string
	readArgs []any
	write    string
	key      []any
}

// buy is a purchase under a lease: read the stock, pause if asked, then
// decrement with the fencing check and insert the order.
func (s store) buy(ctx context.Context, lease dlock.Lease, cfg lockedConfig, userID, goodsID int64, p purchase) (o Order, err error) {
	var stock int
	if err := s.db.QueryRowContext(ctx, p.read, p.readArgs...).Scan(&stock); err != nil {
		return Order{}, err
	}
	if stock <= 0 {
		return Order{}, ErrSoldOut
	}
	if ordered, err := s.hasOrdered(ctx, s.db, userID, goodsID); err != nil {
		return Order{}, err
	} else if ordered {
		return Order{}, ErrDuplicateOrder
	}
	if cfg.holdDelay > 0 {
		time.Sleep(cfg.holdDelay)
	}
	token := int64(lease.Token())
	args := append(append([]any{token}, p.key...), token)
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, p.write, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("%w (token %d)", ErrStaleToken, token)
		}
		o, err = s.insertOrder(ctx, tx, userID, goodsID)
		return err
	})
	return o, err
}

// Segmented splits an item's stock over segment rows (a StockKeeper), each
// under its own lock named after the segment. A buyer starts at the
// segment its user id picks and moves on when that one is empty, so
// buyers queue behind several locks instead of one. Writes are fenced as
// in Locked.
func Segmented(db *sql.DB, segments int, locker dlock.Locker, opts ...Option) (Strategy, error) {
	if segments < 1 {
		return nil, fmt.Errorf("seckill: segments must be at least 1, got %d", segments)
	}
	l, err := Locked(db, "segmented", locker, opts...)
	if err != nil {
		return nil, err
	}
	return segmented{l.(lockedStrategy), segments}, nil
}

type segmented struct {
	lockedStrategy
	segments int
}

var _ StockKeeper = segmented{}

// PutStock splits stock over the item's segment rows.
func (s segmented) PutStock(ctx context.Context, tx *sql.Tx, goodsID int64, stock int) error {
	for seg := range s.segments {
		n := stock / s.segments
		if seg < stock%s.segments {
			n++
		}
		if _, err := tx.ExecContext(ctx, s.q.insertSegment, goodsID, seg, n); err != nil {
			return err
		}
	}
	return nil
}

// StockLeft sums the item's segment rows.
func (s segmented) StockLeft(ctx context.Context, db *sql.DB, goodsID int64) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, s.q.segmentsStock, goodsID).Scan(&n)
	return n, err
}

func (s segmented) PlaceOrder(ctx context.Context, userID, goodsID int64) (Order, error) {
	start := int(userID % int64(s.segments))
	for i := range s.segments {
		seg := (start + i) % s.segments
		o, err := s.fromSegment(ctx, userID, goodsID, seg)
		if !errors.Is(err, ErrSoldOut) {
			return o, err
		}
	}
	return Order{}, ErrSoldOut
}

func (s segmented) fromSegment(ctx context.Context, userID, goodsID int64, seg int) (o Order, err error) {
	lease, err := s.locker.Lock(ctx, lockName(goodsID)+":segment:"+strconv.Itoa(seg))
	if err != nil {
		return Order{}, err
	}
	defer func() { err = unlock(ctx, lease, err) }()
	return s.buy(ctx, lease, s.cfg, userID, goodsID, purchase{
		read:     s.q.segmentStock,
		readArgs: []any{goodsID, seg},
		write:    s.q.fencedSegmentDecrement,
		key:      []any{goodsID, seg},
	})
}
