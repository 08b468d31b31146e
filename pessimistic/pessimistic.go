// Package pessimistic runs transactions that lock the rows they change
// (SELECT … FOR UPDATE), with the parts that are easy to get wrong done
// once: a lock wait timeout per transaction, rollback on error and panic,
// retry of the whole transaction on deadlock and serialization failure,
// and errors classified by what they mean rather than by driver code.
//
//	err := pessimistic.Do(ctx, db, func(ctx context.Context, tx *sql.Tx) error {
//		var stock int
//		q := "SELECT stock FROM goods WHERE id = $1 " + pessimistic.ForUpdate.Postgres()
//		if err := tx.QueryRowContext(ctx, q, id).Scan(&stock); err != nil {
//			return err
//		}
//		…
//	}, pessimistic.WithLockTimeout(2*time.Second))
//
// Inside a transaction of the application's own, InTx (or InPgxTx for a
// pgx.Tx) runs such code under a savepoint of that transaction, joining
// the row locks it already holds instead of waiting for them.
//
// Works with *sql.DB from github.com/jackc/pgx/v5/stdlib (PostgreSQL) and
// github.com/go-sql-driver/mysql (MySQL 8, MariaDB 10.6+).
package pessimistic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// Defaults of Do.
const (
	DefaultMaxAttempts = 5
)

type config struct {
	lockTimeout time.Duration
	maxAttempts int
	backoff     dlock.Backoff
	txOptions   *sql.TxOptions
	// ownTx names the options given that apply only to a transaction of
	// Do's own: InTx refuses them.
	ownTx []string
}

// Option configures Do.
type Option func(*config)

// WithLockTimeout bounds how long each statement of the transaction waits
// for a row lock (PostgreSQL SET LOCAL lock_timeout; MySQL
// innodb_lock_wait_timeout for the session, in whole seconds rounded up,
// restored afterwards). Past it the statement fails with an error
// wrapping ErrLockTimeout. Default: the server's setting. Do refuses a
// negative one, or one longer than MaxLockTimeout, before any I/O.
func WithLockTimeout(d time.Duration) Option { return func(c *config) { c.lockTimeout = d } }

// MaxLockTimeout is the longest lock timeout WithLockTimeout takes:
// PostgreSQL's lock_timeout is at most 2^31-1 ms (24 days 20 h 31 min
// 23.647 s). MySQL's innodb_lock_wait_timeout goes further; the bound is
// one for both.
const MaxLockTimeout = math.MaxInt32 * time.Millisecond

// WithMaxAttempts sets how many times Do runs the transaction when it ends
// in a deadlock or serialization failure. Default DefaultMaxAttempts (5);
// 1 turns retries off.
func WithMaxAttempts(n int) Option {
	return func(c *config) { c.maxAttempts, c.ownTx = n, append(c.ownTx, "WithMaxAttempts") }
}

// WithBackoff sets the pause before each retry. Default
// dlock.ExponentialBackoff(5ms, 500ms).
func WithBackoff(b dlock.Backoff) Option {
	return func(c *config) { c.backoff, c.ownTx = b, append(c.ownTx, "WithBackoff") }
}

// WithTxOptions sets the isolation level and read-only flag.
func WithTxOptions(o *sql.TxOptions) Option {
	return func(c *config) { c.txOptions, c.ownTx = o, append(c.ownTx, "WithTxOptions") }
}

// Do runs fn in a transaction on db and commits it. It rolls back when fn
// returns an error or panics (the panic continues after the rollback), and
// runs the whole transaction again, after a jittered pause, when it ended
// in a deadlock or serialization failure, at most WithMaxAttempts times.
// fn must therefore be safe to run more than once: keep side effects
// outside the database out of it. ctx governs the transaction and the
// pauses. The error wraps ErrLockTimeout, ErrDeadlock or ErrSerialization
// where they apply, and the driver's error.
func Do(ctx context.Context, db *sql.DB, fn func(ctx context.Context, tx *sql.Tx) error, opts ...Option) error {
	if db == nil {
		return errors.New("pessimistic: nil *sql.DB")
	}
	if fn == nil {
		return errors.New("pessimistic: nil fn")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	d, err := sqldialect.Of(ctx, db)
	if err == nil && d == sqldialect.MySQL {
		err = sqldialect.CheckGaleraTransactions(ctx, db)
	}
	if err != nil {
		return fmt.Errorf("pessimistic: %w", err)
	}
	return retry(ctx, &cfg, func() error { return once(ctx, db, d, fn, &cfg) })
}

// ErrGaleraPrepared is returned by Do, before any transaction, on a node
// of a MariaDB Galera cluster reached with go-sql-driver/mysql's
// server-side prepared statements (its default): a transaction another
// node's commit aborts can then go on without its error, its later
// statements committing alone (measured: lost increments, and
// transactions that kept part of their writes). With interpolateParams=true
// in the DSN the error arrives and Do retries the transaction.
var ErrGaleraPrepared = sqldialect.ErrGaleraPrepared

// retry runs once, a whole transaction, again after a jittered pause
// while it ends in a deadlock or serialization failure, at most
// cfg.maxAttempts times, and classifies the error it ends with.
func retry(ctx context.Context, cfg *config, once func() error) error {
	for attempt := 1; ; attempt++ {
		err := once()
		if err == nil {
			return nil
		}
		if !IsRetryable(err) || attempt == cfg.maxAttempts {
			if attempt > 1 {
				err = fmt.Errorf("pessimistic: after %d attempts: %w", attempt, err)
			}
			return classify(err)
		}
		t := time.NewTimer(cfg.backoff(attempt - 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return errjoin.Join(ctx.Err(), classify(err))
		case <-t.C:
		}
	}
}

// newConfig applies opts over Do's defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	cfg := config{maxAttempts: DefaultMaxAttempts, backoff: dlock.ExponentialBackoff(5*time.Millisecond, 500*time.Millisecond)}
	for _, o := range opts {
		if o == nil {
			return config{}, errors.New("pessimistic: nil Option")
		}
		o(&cfg)
	}
	switch {
	case cfg.maxAttempts < 1:
		return config{}, fmt.Errorf("pessimistic: max attempts must be at least 1, got %d", cfg.maxAttempts)
	case cfg.lockTimeout < 0:
		return config{}, fmt.Errorf("pessimistic: lock timeout must not be negative, got %v", cfg.lockTimeout)
	case cfg.lockTimeout > MaxLockTimeout:
		return config{}, fmt.Errorf("pessimistic: lock timeout %v is longer than MaxLockTimeout (%v)", cfg.lockTimeout, MaxLockTimeout)
	case cfg.backoff == nil:
		return config{}, errors.New("pessimistic: nil Backoff")
	}
	return cfg, nil
}

// once runs one attempt on one connection, so the MySQL lock wait timeout
// set for it can be put back before the connection returns to the pool.
func once(ctx context.Context, db *sql.DB, d sqldialect.Dialect, fn func(context.Context, *sql.Tx) error, cfg *config) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // back to the pool; the transaction's outcome is the result
	if cfg.lockTimeout > 0 && d == sqldialect.MySQL {
		secs := timeunit.Ceil(cfg.lockTimeout, time.Second)
		q := fmt.Sprintf("SET @dlock_lock_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = %d", secs)
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if _, rerr := conn.ExecContext(rctx, "SET SESSION innodb_lock_wait_timeout = @dlock_lock_wait"); rerr != nil {
				// Do not pool a session with someone else's timeout.
				_ = conn.Raw(func(any) error { return errBadConn })
				err = errjoin.Join(err, rerr)
			}
		}()
	}
	tx, err := conn.BeginTx(ctx, cfg.txOptions)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = tx.Rollback() // the failure that led here is the error to report
		}
	}()
	if cfg.lockTimeout > 0 && d == sqldialect.Postgres {
		ms := timeunit.Ceil(cfg.lockTimeout, time.Millisecond)
		if _, err := tx.ExecContext(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", ms)); err != nil {
			return err
		}
	}
	if err := fn(ctx, tx); err != nil {
		done = true
		if rerr := tx.Rollback(); rerr != nil && !errors.Is(rerr, sql.ErrTxDone) && !IsConnectionLost(err) {
			return errjoin.Join(err, rerr)
		}
		return err
	}
	done = true
	return tx.Commit()
}
