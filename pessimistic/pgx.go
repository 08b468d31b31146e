package pessimistic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlockhq/dlock/internal/timeunit"
)

// DoPgx is Do for pgx without database/sql: it runs fn in a transaction
// of pool (PostgreSQL), commits it, rolls it back when fn fails or
// panics, and runs it again whole after a deadlock or serialization
// failure. The options are Do's; WithTxOptions' isolation level and
// read-only flag become pgx.TxOptions. The transaction holds one of
// pool's connections while it runs: size the pool for the transactions
// that run at once (pgxpool's MaxConns), since one that finds none free
// waits for one as long as ctx allows.
func DoPgx(ctx context.Context, pool *pgxpool.Pool, fn func(ctx context.Context, tx pgx.Tx) error, opts ...Option) error {
	if pool == nil {
		return errors.New("pessimistic: DoPgx: nil *pgxpool.Pool")
	}
	if fn == nil {
		return errors.New("pessimistic: DoPgx: nil fn")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	txOpts, err := pgxTxOptions(cfg.txOptions)
	if err != nil {
		return err
	}
	return retry(ctx, &cfg, func() error { return oncePgx(ctx, pool, txOpts, fn, &cfg) })
}

// oncePgx is one attempt of DoPgx.
func oncePgx(ctx context.Context, pool *pgxpool.Pool, txOpts pgx.TxOptions, fn func(context.Context, pgx.Tx) error, cfg *config) error {
	tx, err := pool.BeginTx(ctx, txOpts)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback(context.WithoutCancel(ctx)) // the failure or panic that led here is what to report
		}
	}()
	if cfg.lockTimeout > 0 {
		ms := timeunit.Ceil(cfg.lockTimeout, time.Millisecond)
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", ms)); err != nil {
			return err
		}
	}
	if err := fn(ctx, tx); err != nil {
		return err // rolled back above
	}
	done = true
	return tx.Commit(ctx)
}

// pgxTxOptions is o (WithTxOptions) as pgx's transaction options.
func pgxTxOptions(o *sql.TxOptions) (pgx.TxOptions, error) {
	var txOpts pgx.TxOptions
	if o == nil {
		return txOpts, nil
	}
	levels := map[sql.IsolationLevel]pgx.TxIsoLevel{
		sql.LevelDefault:         "",
		sql.LevelReadUncommitted: pgx.ReadUncommitted,
		sql.LevelReadCommitted:   pgx.ReadCommitted,
		sql.LevelRepeatableRead:  pgx.RepeatableRead,
		sql.LevelSerializable:    pgx.Serializable,
	}
	level, ok := levels[o.Isolation]
	if !ok {
		return txOpts, fmt.Errorf("pessimistic: DoPgx: PostgreSQL has no isolation level %v", o.Isolation)
	}
	txOpts.IsoLevel = level
	if o.ReadOnly {
		txOpts.AccessMode = pgx.ReadOnly
	}
	return txOpts, nil
}
