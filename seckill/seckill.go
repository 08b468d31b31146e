// Package seckill is a flash sale ("seckill"): many buyers, one item, a
// stock that must never be oversold and at most one order per buyer. It
// runs the same sale with every strategy dlock offers, so their costs can
// be compared and the oversell of the unlocked version seen:
//
//   - None reads the stock and writes it back: concurrent buyers lose each
//     other's decrements and the item is oversold.
//   - Atomic is one conditional UPDATE … WHERE stock > 0: the baseline
//     every lock is measured against.
//   - Pessimistic locks the row (SELECT … FOR UPDATE) in a transaction.
//   - Optimistic compares and swaps the version column, retrying.
//   - Locked holds a dlock.Locker (tablelock, advisory, redis, zk) around
//     the purchase and writes the lease's fencing token into the row, so a
//     holder whose lease expired mid-purchase cannot write.
//   - Segmented splits the stock over several rows, each under its own
//     lock, so buyers spread over segments do not queue behind one lock.
//
// Tables (seckill_goods, seckill_orders, seckill_segments) come from the
// migrations in seckill/migrations, applied by Migrate or the migrate CLI
// with x-migrations-table=seckill_schema_migrations.
package seckill

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/sqlmigrate"
)

var (
	// ErrSoldOut is returned by PlaceOrder when no stock is left.
	ErrSoldOut = errors.New("seckill: sold out")
	// ErrDuplicateOrder is returned by PlaceOrder when the user already
	// ordered the item; retrying a purchase is therefore safe.
	ErrDuplicateOrder = errors.New("seckill: user already ordered this item")
	// ErrStaleToken is returned by a locked strategy when the row was
	// written by a newer lease holder: this purchase's lease had expired.
	ErrStaleToken = errors.New("seckill: fencing token is stale; the lease expired")
)

// migrationsFS holds seckill's own migrations.
//
//go:embed migrations/postgres/*.sql migrations/mysql/*.sql
var migrationsFS embed.FS

// MigrationsTable records which seckill migrations have run.
const MigrationsTable = "seckill_schema_migrations"

// Migrate applies seckill's migrations to db. ctx governs the run.
func Migrate(ctx context.Context, db *sql.DB) error {
	sub, err := fsSub()
	if err != nil {
		return err
	}
	return sqlmigrate.Up(ctx, db, sub, MigrationsTable)
}

// Order is a placed order.
type Order struct {
	ID        int64
	UserID    int64
	GoodsID   int64
	CreatedAt time.Time
}

// Strategy places one order under one concurrency-control method.
type Strategy interface {
	// Name is the strategy's short name, as the program's --strategy
	// takes it.
	Name() string
	// PlaceOrder sells one unit of goodsID to userID, or returns
	// ErrSoldOut or ErrDuplicateOrder. ctx governs every request.
	PlaceOrder(ctx context.Context, userID, goodsID int64) (Order, error)
}

// store holds the SQL every strategy shares, for one dialect.
type store struct {
	db *sql.DB
	d  sqldialect.Dialect
	q  *queries
}

func newStore(db *sql.DB) (store, error) {
	if db == nil {
		return store{}, errors.New("seckill: nil *sql.DB")
	}
	d, err := sqldialect.Of(context.Background(), db)
	if err != nil {
		return store{}, fmt.Errorf("seckill: %w", err)
	}
	q := &postgresQueries
	if d == sqldialect.MySQL {
		q = &mysqlQueries
	}
	return store{db: db, d: d, q: q}, nil
}

// execer is *sql.DB or *sql.Tx.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// insertOrder records the order, mapping the unique key's violation to
// ErrDuplicateOrder.
func (s store) insertOrder(ctx context.Context, e execer, userID, goodsID int64) (Order, error) {
	o := Order{UserID: userID, GoodsID: goodsID, CreatedAt: time.Now()}
	var err error
	if s.d == sqldialect.Postgres {
		err = e.QueryRowContext(ctx, s.q.insertOrder, userID, goodsID).Scan(&o.ID)
	} else {
		var res sql.Result
		if res, err = e.ExecContext(ctx, s.q.insertOrder, userID, goodsID); err == nil {
			o.ID, err = res.LastInsertId()
		}
	}
	if sqldialect.Duplicate(err) {
		return Order{}, ErrDuplicateOrder
	}
	return o, err
}

// hasOrdered reports whether userID already ordered goodsID.
func (s store) hasOrdered(ctx context.Context, e execer, userID, goodsID int64) (bool, error) {
	var n int
	err := e.QueryRowContext(ctx, s.q.hasOrdered, userID, goodsID).Scan(&n)
	return n > 0, err
}

// inTx runs fn in a transaction, committing when it returns nil.
func (s store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // fn's error is the one to report
		return err
	}
	return tx.Commit()
}

func fsSub() (fs.FS, error) { return fs.Sub(migrationsFS, "migrations") }
