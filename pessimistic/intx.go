package pessimistic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// InTx runs fn inside tx, a transaction of the caller's, so that fn's
// SELECT … FOR UPDATE joins what the caller's transaction already locked
// instead of waiting for it (which Do, a transaction of its own, would do
// until ctx ends). fn runs under a savepoint: when it returns an error or
// panics (the panic continues afterwards), its statements are rolled back
// to the savepoint and tx stays usable, with what the caller did before
// intact. WithLockTimeout bounds fn's lock waits and is put back
// afterwards. The caller commits or rolls back tx. InTx does not retry:
// a deadlock or serialization failure is the caller's transaction's, to
// be run again whole; on MySQL a deadlock has already rolled tx back
// (ErrDeadlock, then tx fails). Errors are classified as Do's. Of the
// options, only WithLockTimeout applies; the others are refused before
// any I/O. ctx governs fn and the statements around it.
func InTx(ctx context.Context, tx *sql.Tx, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	if tx == nil {
		return errors.New("pessimistic: InTx: nil *sql.Tx")
	}
	if fn == nil {
		return errors.New("pessimistic: InTx: nil fn")
	}
	cfg, err := txConfig("InTx", opts)
	if err != nil {
		return err
	}
	d, err := sqldialect.OfTx(ctx, tx)
	if err != nil {
		return fmt.Errorf("pessimistic: %w", err)
	}
	return inTx(ctx, sqlTx{tx}, d, cfg, func() error { return fn(ctx, tx) })
}

// InPgxTx is InTx for a pgx.Tx (pgx without database/sql: a transaction
// of a *pgx.Conn or a *pgxpool.Pool), on PostgreSQL.
func InPgxTx(ctx context.Context, tx pgx.Tx, fn func(ctx context.Context, tx pgx.Tx) error, opts ...Option) error {
	if tx == nil {
		return errors.New("pessimistic: InPgxTx: nil pgx.Tx")
	}
	if fn == nil {
		return errors.New("pessimistic: InPgxTx: nil fn")
	}
	cfg, err := txConfig("InPgxTx", opts)
	if err != nil {
		return err
	}
	return inTx(ctx, pgxTx{tx}, sqldialect.Postgres, cfg, func() error { return fn(ctx, tx) })
}

// txConfig is newConfig for a caller's transaction: an option that
// only a transaction of Do's own has a use for is refused.
func txConfig(fn string, opts []Option) (config, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return config{}, err
	}
	if len(cfg.ownTx) > 0 {
		return config{}, fmt.Errorf("pessimistic: %s does not take %s: the caller's transaction is the caller's to retry", fn, cfg.ownTx[0])
	}
	return cfg, nil
}

// savepoints numbers InTx's savepoints, so that calls may nest.
var savepoints atomic.Uint64

// statements is what inTx runs around fn, on either kind of transaction.
type statements interface {
	exec(ctx context.Context, q string, args ...any) error
	queryString(ctx context.Context, q string, args ...any) (string, error)
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) exec(ctx context.Context, q string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, q, args...)
	return err
}

func (t sqlTx) queryString(ctx context.Context, q string, args ...any) (s string, err error) {
	err = t.tx.QueryRowContext(ctx, q, args...).Scan(&s)
	return s, err
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) exec(ctx context.Context, q string, args ...any) error {
	_, err := t.tx.Exec(ctx, q, args...)
	return err
}

func (t pgxTx) queryString(ctx context.Context, q string, args ...any) (s string, err error) {
	err = t.tx.QueryRow(ctx, q, args...).Scan(&s)
	return s, err
}

// inTx runs fn under a savepoint of t with cfg's lock timeout, and puts
// the timeout back whatever fn does.
func inTx(ctx context.Context, t statements, d sqldialect.Dialect, cfg config, fn func() error) (err error) {
	sp := fmt.Sprintf("dlock_pessimistic_%d", savepoints.Add(1))
	if err := t.exec(ctx, "SAVEPOINT "+sp); err != nil {
		return classify(err)
	}
	restore, err := setLockTimeout(ctx, t, d, sp, cfg.lockTimeout)
	if err != nil {
		return errjoin.Join(classify(err), rollbackTo(ctx, t, sp))
	}
	ended := false
	defer func() {
		if !ended { // fn panicked
			_ = rollbackTo(ctx, t, sp)
			_ = restore()
		}
	}()
	err = fn()
	ended = true
	if err != nil {
		return errjoin.Join(classify(err), rollbackTo(ctx, t, sp), restore())
	}
	if err := restore(); err != nil {
		return err
	}
	return classify(t.exec(ctx, "RELEASE SAVEPOINT "+sp))
}

// setLockTimeout sets the lock timeout for fn's statements, if one is
// given, and returns what puts the one before back.
func setLockTimeout(ctx context.Context, t statements, d sqldialect.Dialect, sp string, timeout time.Duration) (restore func() error, err error) {
	none := func() error { return nil }
	if timeout <= 0 {
		return none, nil
	}
	bctx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	}
	if d == sqldialect.MySQL {
		secs := timeunit.Ceil(timeout, time.Second)
		if err := t.exec(ctx, fmt.Sprintf("SET @%s = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = %d", sp, secs)); err != nil {
			return none, err
		}
		return func() error {
			rctx, cancel := bctx()
			defer cancel()
			return t.exec(rctx, fmt.Sprintf("SET SESSION innodb_lock_wait_timeout = @%s", sp))
		}, nil
	}
	ms := timeunit.Ceil(timeout, time.Millisecond)
	prev, err := t.queryString(ctx, "SELECT current_setting('lock_timeout')")
	if err != nil {
		return none, err
	}
	if _, err := t.queryString(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", ms)); err != nil {
		return none, err
	}
	return func() error {
		rctx, cancel := bctx()
		defer cancel()
		_, err := t.queryString(rctx, "SELECT set_config('lock_timeout', $1, true)", prev)
		return err
	}, nil
}

// rollbackTo rolls fn's statements back to the savepoint sp. A MySQL
// deadlock has rolled the whole transaction back already, savepoint and
// all: then there is nothing to roll back here.
func rollbackTo(ctx context.Context, t statements, sp string) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := t.exec(rctx, "ROLLBACK TO SAVEPOINT "+sp)
	if err != nil && (IsConnectionLost(err) || strings.Contains(err.Error(), "does not exist") || errors.Is(err, sql.ErrTxDone)) {
		return nil
	}
	return err
}
