package tablelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/sqlrecord"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// Table is the lock table, as created by package migrations.
const Table = "dlock_locks"

// Columns are the columns of Table this package reads and writes on
// PostgreSQL, in order. The migrations create exactly these (a test checks
// it).
var Columns = []string{"name", "owner", "reentry", "token", "acquired_at", "expires_at", "payload"}

// MySQLColumns are Columns on MySQL/MariaDB, where waiters also stamp
// waited_at (see migration 000004).
var MySQLColumns = []string{"name", "owner", "reentry", "token", "acquired_at", "expires_at", "waited_at", "payload"}

// Locker is a lock table client, safe for concurrent use by every
// goroutine of a process.
type Locker struct {
	*dlock.Client
	b *backend
	// adapter is the *sql.DB NewPool made over the caller's pool, which
	// Close closes; nil for New's.
	adapter *sql.DB
}

var (
	_ dlock.Locker    = (*Locker)(nil)
	_ dlock.Inspector = (*Locker)(nil)
	_ dlock.Recorder  = (*Locker)(nil)
)

// New returns a Locker on db, a PostgreSQL or MySQL/MariaDB database whose
// schema is at the latest migration, opened with any database/sql driver:
// pgx's stdlib and go-sql-driver/mysql are known by type; for any other
// (lib/pq, an instrumenting wrapper such as otelsql) the first call asks
// the server which database it is. New does no I/O: a nil db or an invalid
// option is an error at once. db stays the caller's: Close does not close
// it.
func New(db *sql.DB, opts ...dlock.Option) (*Locker, error) {
	if db == nil {
		return nil, errors.New("tablelock: nil *sql.DB")
	}
	b := &backend{db: db}
	c, err := dlock.NewClient(b, opts...)
	if err != nil {
		return nil, err
	}
	if err := checkPruneIdle(c.Config()); err != nil {
		_ = c.Close(context.Background()) // holds nothing yet: no I/O
		return nil, err
	}
	b.log = c.Config().Logger
	b.backoff = c.Config().Backoff
	b.queueTTL = 2*c.Config().PushFallback + time.Second
	b.pruner = newPruner(db, c.Config())
	return &Locker{Client: c, b: b}, nil
}

// NewPool is New for an application that uses pgx without
// database/sql: the Locker reaches pool through pgx's database/sql
// adapter (stdlib.OpenDBFromPool), which borrows pool's connections and
// keeps none idle of its own, so the pool's MaxConns bounds both the
// application and the Locker. Close closes the adapter, never pool. It
// does no I/O.
func NewPool(pool *pgxpool.Pool, opts ...dlock.Option) (*Locker, error) {
	l, db, err := sqldialect.OverPool(pool, "tablelock", func(db *sql.DB) (*Locker, error) { return New(db, opts...) })
	if err != nil {
		return nil, err
	}
	l.adapter = db
	return l, nil
}

// Close ends every lease of l and releases their locks (see
// dlock.Client.Close); the last Locker of a *sql.DB to close also closes
// the listener connection. Close twice is a no-op.
func (l *Locker) Close(ctx context.Context) error {
	err := l.Client.Close(ctx)
	l.b.close()
	l.b.pruner.close()
	if l.adapter != nil {
		err = errors.Join(err, l.adapter.Close())
	}
	return err
}

// dialectBackend is one database's statements.
type dialectBackend interface {
	driver.Backend
	driver.Transferer
	driver.Notifier
	dlock.Inspector
}

// backend picks the dialect's statements at first use and hands every call
// to them.
type backend struct {
	db       *sql.DB
	log      *slog.Logger
	backoff  dlock.Backoff // paces a MySQL room's poll (see subscribe)
	queueTTL time.Duration // see postgres.queueTTL
	pruner   *pruner       // nil: WithPruneIdle(0)

	mu       sync.Mutex
	d        dialectBackend // nil until the dialect is known
	listener *listener      // shared per *sql.DB; nil unless PostgreSQL
	closed   bool
}

var (
	_ driver.Backend       = (*backend)(nil)
	_ driver.Notifier      = (*backend)(nil)
	_ driver.LiveNotifier  = (*backend)(nil)
	_ driver.Transferer    = (*backend)(nil)
	_ driver.Leaver        = (*backend)(nil)
	_ driver.DeadlineBound = (*backend)(nil)
	_ driver.CancelBound   = (*backend)(nil)
	_ driver.PayloadKeeper = (*backend)(nil)
	_ dlock.Inspector      = (*backend)(nil)
	_ dlock.Recorder       = (*backend)(nil)
)

// get returns the dialect's backend once the dialect is known and the
// schema checked (checkSchema): the first call that reaches the database
// learns both, and until they are learnt each call tries again.
func (b *backend) get(ctx context.Context) (dialectBackend, error) {
	b.mu.Lock()
	d := b.d
	b.mu.Unlock()
	if d != nil {
		return d, nil
	}
	dialect, err := sqldialect.Of(ctx, b.db)
	if err != nil {
		return nil, fmt.Errorf("tablelock: %w", err)
	}
	if dialect == sqldialect.Postgres {
		if err := sqldialect.CheckPooledStatements(ctx, b.db); err != nil {
			return nil, fmt.Errorf("tablelock: %w", err)
		}
	}
	if err := checkSchema(ctx, b.db, dialect); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.d == nil {
		switch dialect {
		case sqldialect.Postgres:
			p := &postgres{db: b.db, queueTTL: b.queueTTL, log: b.log}
			if !b.closed {
				b.listener = listenerFor(b.db, b.log, b.queueTTL)
				p.listener = b.listener
			}
			b.d = p
		case sqldialect.MySQL:
			b.d = &mysql{db: b.db, log: b.log, backoff: b.backoff}
		}
	}
	return b.d, nil
}

func (b *backend) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed && b.listener != nil {
		b.listener.unref()
	}
	b.closed = true
}

// Acquire runs the attempt again, up to deadlockRetries times, when the
// server rolled it back to break a deadlock (with Prune's batch, say):
// nothing of it held, and an attempt is not a miss because of it.
func (b *backend) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	d, err := b.get(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	g, err := retried(ctx, func() (driver.Grant, error) { return d.Acquire(ctx, r) })
	return g, schemaHint(err)
}

// deadlockRetries is how many times a statement the server rolled back to
// break a deadlock runs again.
const deadlockRetries = 3

// retried runs one statement, and again, up to deadlockRetries times,
// while the server rolls it back to break a deadlock or, on a Galera
// cluster, for a certification conflict with a write on another node
// (both error 1213): nothing of it held.
func retried[T any](ctx context.Context, statement func() (T, error)) (T, error) {
	for retry := 0; ; retry++ {
		v, err := statement()
		if !sqldialect.Deadlock(err) || retry == deadlockRetries || ctx.Err() != nil {
			return v, err
		}
	}
}

// retriedErr is retried for a statement that returns only an error.
func retriedErr(ctx context.Context, statement func() error) error {
	_, err := retried(ctx, func() (struct{}, error) { return struct{}{}, statement() })
	return err
}

func (b *backend) Refresh(ctx context.Context, h driver.Hold) error {
	d, err := b.get(ctx)
	if err != nil {
		return err
	}
	return retriedErr(ctx, func() error { return d.Refresh(ctx, h) })
}

// Release releases h, and starts a background prune when one is due
// (WithPruneIdle).
func (b *backend) Release(ctx context.Context, h driver.Hold) error {
	d, err := b.get(ctx)
	if err != nil {
		return err
	}
	err = retriedErr(ctx, func() error { return d.Release(ctx, h) })
	b.pruner.poke()
	return err
}

// Transfer hands h's row to r.Owner in one UPDATE: owner, a new token
// and a new expiry, committed as an acquire is.
func (b *backend) Transfer(ctx context.Context, h driver.Hold, r driver.Request) (driver.Grant, error) {
	d, err := b.get(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	return retried(ctx, func() (driver.Grant, error) { return d.Transfer(ctx, h, r) })
}

// Leave takes a waiter that gave up out of PostgreSQL's queue and gives
// back a grant made to it meanwhile (see pgLeaveQueue).
func (b *backend) Leave(ctx context.Context, r driver.Request) error {
	d, err := b.get(ctx)
	if err != nil {
		return err
	}
	if l, ok := d.(driver.Leaver); ok {
		return l.Leave(ctx, r)
	}
	return nil
}

func (b *backend) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	d, err := b.get(ctx)
	if err != nil {
		return dlock.Holder{}, false, err
	}
	h, ok, err := d.Inspect(ctx, name)
	return h, ok, schemaHint(err)
}

// Subscribe pushes wake-ups on PostgreSQL through pgx's stdlib driver
// (where it cannot, waiters poll: errors.ErrUnsupported), and within the
// process on MySQL (see room).
func (b *backend) Subscribe(ctx context.Context, r driver.Request) (<-chan struct{}, func(), error) {
	d, err := b.get(ctx)
	if err != nil {
		return nil, nil, err
	}
	return d.Subscribe(ctx, r)
}

// SubscribeLive subscribes with no I/O once the dialect is known, on
// MySQL always and on PostgreSQL while its LISTEN connection is up (see
// postgres.SubscribeLive).
func (b *backend) SubscribeLive(r driver.Request) (<-chan struct{}, func(), bool) {
	b.mu.Lock()
	d := b.d
	b.mu.Unlock()
	if n, ok := d.(driver.LiveNotifier); ok {
		return n.SubscribeLive(r)
	}
	return nil, nil, false
}

// BoundsCalls reports whether db's driver is pgx's stdlib or
// go-sql-driver/mysql: each ends a statement's I/O at once when its ctx
// ends, and database/sql waits for a pooled connection no longer than
// ctx. Client then makes attempts and releases on the caller's goroutine
// (driver.DeadlineBound). Any other driver (lib/pq, an instrumenting
// wrapper) may outlast its ctx, and gets a worker.
func (b *backend) BoundsCalls() bool {
	_, known := sqldialect.Known(b.db)
	return known
}

// EndsOnCancel implements driver.CancelBound: both drivers BoundsCalls
// knows also end a statement's I/O at once when its ctx is cancelled.
func (b *backend) EndsOnCancel() bool { return b.BoundsCalls() }

// List implements dlock.Lister: the live rows whose names start with
// prefix, in name order.
func (b *backend) List(ctx context.Context, prefix string, limit int) ([]dlock.Held, error) {
	d, err := b.get(ctx)
	if err != nil {
		return nil, err
	}
	q, args := pgList, []any{prefix, limit}
	if _, ok := d.(*mysql); ok {
		q, args = myList, []any{prefix, prefix, limit}
	}
	rows, err := b.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var held []dlock.Held
	for rows.Next() {
		var (
			h             dlock.Held
			leftUS, ageUS int64
		)
		if err := rows.Scan(&h.Name, &h.Owner, &h.Token, &leftUS, &h.Payload, &ageUS, &h.Waiters); err != nil {
			return nil, errors.Join(err, rows.Close())
		}
		h.TTL, h.Age = timeunit.Of(leftUS, time.Microsecond), timeunit.Of(ageUS, time.Microsecond)
		held = append(held, h)
	}
	if err := rows.Err(); err != nil {
		return nil, errors.Join(err, rows.Close())
	}
	return held, rows.Close()
}

// ForceRelease implements dlock.ForceReleaser: the row is freed as a
// release frees it, its token advanced past the evicted holder's, and the
// processes waiting for it are woken; the holder's next renewal finds it
// gone.
func (b *backend) ForceRelease(ctx context.Context, name string) (dlock.Holder, bool, error) {
	d, err := b.get(ctx)
	if err != nil {
		return dlock.Holder{}, false, err
	}
	var h dlock.Holder
	if _, ok := d.(*mysql); !ok {
		err = b.db.QueryRowContext(ctx, pgForceRelease, name).Scan(&h.Owner, &h.Token, &h.Payload)
	} else {
		err = retriedErr(ctx, func() error { return myForceRelease(ctx, b.db, name, &h) })
	}
	if errors.Is(err, sql.ErrNoRows) {
		return dlock.Holder{}, false, nil
	}
	if err != nil {
		return dlock.Holder{}, false, err
	}
	if _, ok := d.(*mysql); ok {
		released(b.db, name) // this process's waiters; others poll
	}
	return h, true, nil
}

// pgForceRelease frees name's row whoever holds it, wakes every listening
// process (see listener), and returns the holder it evicted.
const pgForceRelease = `
WITH old AS (
	SELECT owner, token, coalesce(payload, '') AS payload FROM dlock_locks
	WHERE name = $1 AND owner IS NOT NULL AND expires_at > now() FOR UPDATE
), freed AS (
	UPDATE dlock_locks l SET owner = NULL, payload = NULL, reentry = 0, expires_at = 'epoch', token = GREATEST(l.token + 1, ` + pgClock + `)
	FROM old WHERE l.name = $1
	RETURNING old.owner, old.token, old.payload
)
SELECT owner, token, payload FROM freed WHERE pg_notify('` + notifyChannel + `', '0/' || $1) IS NOT NULL`

// myForceRelease is pgForceRelease on MySQL, in a transaction of two
// statements.
func myForceRelease(ctx context.Context, db *sql.DB, name string, h *dlock.Holder) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	err = tx.QueryRowContext(ctx, `SELECT owner, token, IFNULL(payload, '') FROM dlock_locks
		WHERE name = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) FOR UPDATE`, name).Scan(&h.Owner, &h.Token, &h.Payload)
	if err == nil {
		// The hold read, and only it: should the transaction be gone
		// under this statement (a Galera node that aborted it without
		// the error arriving), the UPDATE alone still ends no other hold.
		var res sql.Result
		res, err = tx.ExecContext(ctx, `UPDATE dlock_locks SET owner = NULL, payload = NULL, reentry = 0, expires_at = '1970-01-01',
			token = GREATEST(token + 1, `+myClock+`) WHERE name = ? AND owner = ? AND token = ?`, name, h.Owner, h.Token)
		if err == nil {
			if n, rerr := res.RowsAffected(); rerr == nil && n == 0 {
				err = sql.ErrNoRows // the hold read is gone: nobody was evicted
			}
		}
	}
	if err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

// The statements of List: each held row with its holder, how long it has
// been held, and its waiters (the processes queued for it on PostgreSQL;
// MySQL keeps no queue, so dlock.UnknownWaiters).
const (
	pgList = `
SELECT name, owner, token, (extract(epoch FROM expires_at - now()) * 1e6)::bigint, coalesce(payload, ''),
	coalesce((extract(epoch FROM now() - acquired_at) * 1e6)::bigint, 0),
	(SELECT count(*) FROM dlock_waiters w WHERE w.name = l.name AND w.expires_at > now())
FROM dlock_locks l WHERE owner IS NOT NULL AND expires_at > now() AND substr(name, 1, char_length($1)) = $1
ORDER BY name LIMIT $2`
	myList = `
SELECT name, owner, token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), IFNULL(payload, ''),
	IFNULL(TIMESTAMPDIFF(MICROSECOND, acquired_at, UTC_TIMESTAMP(6)), 0), -1
FROM dlock_locks WHERE owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AND LEFT(name, CHAR_LENGTH(?)) = ?
ORDER BY name LIMIT ?`
)

// KeepsPayload implements driver.PayloadKeeper: the payload is a column
// of the lock's row (migrations PostgreSQL 000008, MySQL 000011).
func (*backend) KeepsPayload() bool { return true }

// DBSystem implements driver.DBSystem.
func (b *backend) DBSystem() string { return sqldialect.DBSystem(b.db) }

func schemaHint(err error) error { return sqldialect.SchemaHint(err) }

func micros(d time.Duration) int64 { return d.Microseconds() + boolInt(d%time.Microsecond != 0) }

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func notHeld(h driver.Hold) error {
	return fmt.Errorf("%w: %q is not held by %q with token %d", dlock.ErrNotHeld, h.Name, h.Owner, h.Token)
}

// Record implements dlock.Recorder in the dlock_records table (MySQL
// migration 000010, PostgreSQL 000007).
func (b *backend) Record(ctx context.Context, name string, token uint64, value []byte) error {
	return sqlrecord.Write(ctx, b.db, name, token, value)
}

// Recorded implements dlock.Recorder.
func (b *backend) Recorded(ctx context.Context, name string) (dlock.Record, bool, error) {
	return sqlrecord.Read(ctx, b.db, name)
}
