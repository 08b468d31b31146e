package advisory

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/sqlrecord"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// ErrPoolExhausted is returned by TryLock when db's pool is bounded
// (db.SetMaxOpenConns, or the MaxConns of the pgxpool behind a db from
// stdlib.OpenDBFromPool) and every connection is in use, for instance
// pinned by held locks. Lock waits for a connection instead.
var ErrPoolExhausted = errors.New("advisory: connection pool exhausted")

// ErrPooler is returned by Lock and TryLock on PostgreSQL reached
// through a connection pooler (PgBouncer, pgcat, Odyssey, RDS Proxy): a
// session lock is held by the server session, which transaction or
// statement pooling hands to other clients between statements, so a
// second client could take or release the lock on it. A Locker tells the
// pooler at its first use, with pgx's stdlib driver, by comparing the
// process id the connection was given with the server's. LockTx works
// through any pooler; so does package tablelock. With PgBouncer's
// pool_mode = session, which keeps each client's server session, say so
// with WithSessionPooling.
var ErrPooler = errors.New("advisory: session locks need a server session of their own")

// ErrNodeLocal is returned by Lock and TryLock on a node of a MariaDB
// or MySQL multi-primary cluster (Galera: wsrep_on): GET_LOCK is held by
// the node the session is on, and clients of another node take the same
// lock at once. Package tablelock's rows are replicated and certified
// across the cluster; use it there.
var ErrNodeLocal = errors.New("advisory: GET_LOCK is local to one node of the cluster")

// sessionPoolingKey is WithSessionPooling's setting.
type sessionPoolingKey struct{}

// WithSessionPooling says that the pooler between db and PostgreSQL
// keeps each client connection on one server session for as long as it
// is open (PgBouncer's pool_mode = session): session locks are then
// safe through it, and a Locker takes them instead of failing with
// ErrPooler. Do not pass it for transaction or statement pooling:
// there, two clients would share the server session that holds a lock.
func WithSessionPooling() dlock.Option { return dlock.WithSetting(sessionPoolingKey{}, true) }

// MaxTTL is the longest lease TTL (dlock.WithTTL) a Locker takes. A held
// lock's session gets the TTL as its idle timeout, which ends the lease
// on the server's side, and 2147483 seconds (24 days 20 h 31 min 23 s) is
// the longest every server keeps: PostgreSQL's idle_session_timeout
// takes up to 2^31-1 ms, and MySQL's wait_timeout up to 2147483 s on
// Windows (31536000 s elsewhere, and a longer one is cut down to that, so
// the server would end the session, and drop the lock, before the lease
// ends). New refuses a longer TTL.
const MaxTTL = 2147483 * time.Second

// cancelTimeout bounds an attempt that does not wait, and a session's
// clean-up, neither of which a cancelled ctx cuts short.
const cancelTimeout = 5 * time.Second

// endWithin bounds the end of a wait whose ctx ended: the session killed
// from another connection and gone from the server's list, or else its
// connection closed. What is left of dlock.CancelMargin then covers the
// wait's return, so a Lock returns within the margin (see BoundsCalls).
const endWithin = dlock.CancelMargin * 3 / 4

// Locker is an advisory lock client, safe for concurrent use by every
// goroutine of a process: each hold pins a session of its own.
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

// New returns a Locker on db, a PostgreSQL 14+ or MySQL/MariaDB database
// whose schema is at the latest migration of package migrations, opened
// with any database/sql driver (see tablelock.New for how the dialect is
// told). New does no I/O. db stays the caller's. The TTL (dlock.WithTTL)
// may be at most MaxTTL.
func New(db *sql.DB, opts ...dlock.Option) (*Locker, error) {
	if db == nil {
		return nil, errors.New("advisory: nil *sql.DB")
	}
	b := &backend{db: db, pool: sqldialect.PgxPool(db)}
	c, err := dlock.NewClient(b, opts...)
	if err != nil {
		return nil, err
	}
	cfg := c.Config()
	b.log = cfg.Logger
	_, b.sessionPooling = cfg.Setting(sessionPoolingKey{})
	return &Locker{Client: c, b: b}, nil
}

// NewPool is New for an application that uses pgx without
// database/sql: the Locker reaches pool through pgx's database/sql
// adapter (stdlib.OpenDBFromPool), which borrows pool's connections and
// keeps none idle of its own, so the pool's MaxConns bounds both the
// application and the Locker. Close closes the adapter, never pool. It
// does no I/O.
func NewPool(pool *pgxpool.Pool, opts ...dlock.Option) (*Locker, error) {
	l, db, err := sqldialect.OverPool(pool, "advisory", func(db *sql.DB) (*Locker, error) { return New(db, opts...) })
	if err != nil {
		return nil, err
	}
	l.adapter = db
	return l, nil
}

// Close ends every lease and waiting Lock of l and releases its locks, as
// dlock.Client's Close does, and then returns the sessions it kept for
// its next holds to db's pool.
func (l *Locker) Close(ctx context.Context) error {
	err := l.Client.Close(ctx)
	l.b.dropSpares()
	if l.adapter != nil {
		err = errors.Join(err, l.adapter.Close())
	}
	return err
}

// session is a pinned connection and the session settings a hold changed,
// to put back before the connection returns to the pool.
type session struct {
	conn  *sql.Conn
	saved [2]string
	// id is the server's id of the session, 0 until sessionID asked.
	id int64
	// timeout is the idle timeout, in seconds, that a MySQL hold set and
	// restore puts back; 0 while the session has the server's default.
	// (PostgreSQL's statements set and restore theirs themselves.)
	timeout int64
	// spareTimer gives a spare session back to the pool (see spare).
	spareTimer *time.Timer
	// dropped is set when a release on the session was cut off: its
	// connection is discarded, and the session, with its locks, ends when
	// the server sees it close, or when endDropped ends it.
	dropped bool
}

// dialect is one database's advisory lock statements. Every method runs on
// the session it is given.
type dialect interface {
	// try takes name without waiting and, when it got it, returns a new
	// token and sets the session's idle timeout to ttl.
	try(ctx context.Context, s *session, r driver.Request) (token uint64, ok bool, err error)
	// sessionID names s to endSession.
	sessionID(ctx context.Context, s *session) (int64, error)
	// wait takes name, waiting in the server's queue; then as try.
	wait(ctx context.Context, s *session, r driver.Request) (token uint64, err error)
	// waitFirst reports whether a Lock should go straight to wait, which
	// takes a free lock as try does: true where that costs no more round
	// trips than try, whose miss would then be a round trip spent.
	waitFirst() bool
	// interrupt asks the server, from another connection of db, to stop
	// the statement session id runs now; one that arrives between two
	// statements is dropped.
	interrupt(ctx context.Context, db *sql.DB, id int64) error
	// giveUpAll releases every lock s holds, and its holder rows, on s:
	// what a wait that was interrupted may have been granted meanwhile.
	giveUpAll(ctx context.Context, s *session, name string) error
	// endSession ends session id, and whatever statement it runs, from
	// another connection of db, and returns once the server has ended it
	// and so released whatever it held: a wait killed on the server may
	// be granted the lock before it notices, until the session is gone.
	endSession(ctx context.Context, db *sql.DB, id int64) error
	// holderSession is the id of the session that holds h's lock for
	// h.Owner with h.Token, looked up from another connection of db; 0
	// when no session does, or the dialect cannot tell.
	holderSession(ctx context.Context, db *sql.DB, h driver.Hold) (int64, error)
	ping(ctx context.Context, s *session) error
	// transfer gives the lock s holds for h to r.Owner with a token
	// larger than h's, on the same session; ok is false when s no longer
	// holds it.
	transfer(ctx context.Context, s *session, h driver.Hold, r driver.Request) (token uint64, ok bool, err error)
	// release unlocks name; ok is false when the session did not hold
	// name. Settings a hold changed are restored, or left to restore.
	release(ctx context.Context, s *session, name string) (ok bool, err error)
	// restore puts back the settings a hold changed and release left in
	// place (s.timeout), before the connection returns to the pool.
	restore(ctx context.Context, s *session) error
	holder(ctx context.Context, db *sql.DB, name string) (dlock.Holder, bool, error)
}

// backend implements driver.Backend; a hold's Handle is its *session.
type backend struct {
	db  *sql.DB
	log *slog.Logger
	// pool is the pgxpool behind db (stdlib.OpenDBFromPool), whose bound
	// db's Stats do not show; nil for any other db.
	pool *pgxpool.Pool

	// sessionPooling is WithSessionPooling's: a pooler found is trusted
	// to keep each connection's server session.
	sessionPooling bool

	mu     sync.Mutex
	d      dialect    // nil until known
	spares []*session // released sessions still set up for a hold
	// pooled is why session locks are refused (ErrPooler, ErrNodeLocal),
	// and named why every lock is (sqldialect.ErrPooledStatements); set by
	// checked, on the first new session's connection (checkDone).
	pooled, named error
	checkDone     bool
	// checkMu serializes checked's I/O, outside mu.
	checkMu sync.Mutex
}

// DBSystem implements driver.DBSystem.
func (b *backend) DBSystem() string { return sqldialect.DBSystem(b.db) }

// dialect returns the database's statements, telling them at first use.
// On MySQL the first use also looks at where dlock_fences keeps its rows
// (warnMemoryFences), after b.mu is let go: a caller that finds the
// dialect known never waits for that question.
func (b *backend) dialect(ctx context.Context) (dialect, error) {
	d, first, err := b.knownDialect(ctx)
	if first {
		if _, ok := d.(*mysql); ok {
			warnMemoryFences(ctx, b.db, b.log)
		}
	}
	return d, err
}

// knownDialect is dialect without the first use's question; first is
// whether this call told the dialect.
func (b *backend) knownDialect(ctx context.Context) (d dialect, first bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.d != nil {
		return b.d, false, nil
	}
	which, err := sqldialect.Of(ctx, b.db)
	if err != nil {
		return nil, false, fmt.Errorf("advisory: %w", err)
	}
	switch which {
	case sqldialect.Postgres:
		_, pgx := b.db.Driver().(*stdlib.Driver)
		b.d = postgres{pgx: pgx}
	case sqldialect.MySQL:
		b.d = &mysql{log: b.log}
	}
	return b.d, true, nil
}

// checked returns the dialect for a session lock on conn, a connection
// new to the Locker, once the first such connection has shown whether
// session locks can be held on b.db: through a pooler that may share the
// server session (sqldialect.Pooler; with a driver other than pgx,
// sqldialect.SharedSessions) they are refused with ErrPooler, unless
// WithSessionPooling; with pgx's named statements through a pooler, every
// lock is (sqldialect.ErrPooledStatements); on a Galera node, with
// ErrNodeLocal. The check runs on conn, a connection the caller has
// already (a Locker whose pool is exhausted waits for one as a lock
// does), and once: until it succeeds.
func (b *backend) checked(ctx context.Context, conn *sql.Conn) (dialect, error) {
	b.checkMu.Lock()
	defer b.checkMu.Unlock()
	d, err := b.dialect(ctx)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	done := b.checkDone
	b.mu.Unlock()
	if !done {
		// Bounded as an attempt is: a frozen server fails the check,
		// which the next new session makes again.
		cctx, cancel := detached(ctx, cancelTimeout)
		switch d := d.(type) {
		case postgres:
			err = b.checkPooler(cctx, conn, d)
		case *mysql:
			err = b.checkGalera(cctx, conn)
		}
		cancel()
		if err != nil {
			return nil, fmt.Errorf("advisory: %w", err)
		}
	}
	return b.sessions(ctx)
}

// checkPooler is checked's look for a pooler on PostgreSQL.
func (b *backend) checkPooler(ctx context.Context, conn *sql.Conn, d postgres) error {
	pooled, detail, known, err := sqldialect.Pooler(ctx, conn)
	if err == nil && !known && b.db.Stats().MaxOpenConnections != 1 {
		// Another driver: does a second connection share this one's
		// session? A probe that cannot get its connection in time
		// (a pool in use) tells nothing.
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		pooled, err = sqldialect.SharedSessions(pctx, b.db, conn)
		cancel()
		if err != nil && ctx.Err() == nil {
			pooled, err = false, nil
		}
		if pooled {
			detail = "a second connection saw this one's session setting"
		}
	}
	var named error
	if err == nil && pooled && d.pgx {
		named, err = sqldialect.PooledStatements(conn, detail), nil
	}
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checkDone = true
	if !pooled {
		return nil
	}
	if named != nil {
		b.named = fmt.Errorf("advisory: %w", named)
	}
	if !b.sessionPooling {
		b.pooled = fmt.Errorf("%w, and a pooler stands between this Locker and PostgreSQL (%s), which under transaction or statement pooling lets other clients use the session that holds a lock: use LockTx or package tablelock, or, with PgBouncer's pool_mode = session, advisory.WithSessionPooling()", ErrPooler, detail)
	}
	// Behind a pooler the connection's process id is the pooler's: the
	// session's id is asked of the server.
	b.d = postgres{pgx: false}
	return nil
}

// probeTimeout bounds checkPooler's probe with a second connection, and
// LockTx's wait for a connection to check on.
const probeTimeout = 2 * time.Second

// checkGalera is checked's look for a Galera node (wsrep_on) on MySQL.
func (b *backend) checkGalera(ctx context.Context, conn *sql.Conn) error {
	galera, err := sqldialect.GaleraNode(ctx, conn)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.checkDone = true
	if galera {
		b.pooled = fmt.Errorf("%w: this server is a node of a Galera cluster (wsrep_on), and clients of the other nodes would take the same lock at once: use package tablelock, whose rows the cluster replicates", ErrNodeLocal)
	}
	return nil
}

// sessions returns the dialect for a session lock, or why session locks
// are refused on b.db, as far as checked has found.
func (b *backend) sessions(ctx context.Context) (dialect, error) {
	if _, err := b.dialect(ctx); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.named != nil {
		return nil, b.named
	}
	if b.pooled != nil {
		return nil, b.pooled
	}
	return b.d, nil
}

// checkedForTx runs checked, for LockTx, on a connection of its own when
// the check has not run yet and one is free within probeTimeout; an
// exhausted pool leaves the check to the next call.
func (b *backend) checkedForTx(ctx context.Context) error {
	b.mu.Lock()
	done := b.checkDone
	b.mu.Unlock()
	if !done {
		cctx, cancel := context.WithTimeout(ctx, probeTimeout)
		conn, err := b.db.Conn(cctx)
		cancel()
		if err != nil {
			return ctx.Err()
		}
		defer func() { _ = conn.Close() }() // back to the pool
		if _, err := b.checked(ctx, conn); err != nil && !errors.Is(err, ErrPooler) && !errors.Is(err, ErrNodeLocal) {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.named
}

var (
	_ driver.Backend       = (*backend)(nil)
	_ driver.Blocker       = (*backend)(nil)
	_ driver.Transferer    = (*backend)(nil)
	_ driver.DeadlineBound = (*backend)(nil)
	_ driver.CancelBound   = (*backend)(nil)
	_ driver.TTLBounded    = (*backend)(nil)
	_ dlock.Inspector      = (*backend)(nil)
	_ dlock.Recorder       = (*backend)(nil)
)

// BoundsCalls reports whether db's driver is pgx's stdlib or
// go-sql-driver/mysql, each of which ends a statement's I/O at once when
// its ctx ends, and whether a wait goes straight to the server's queue
// (dialect.waitFirst; otherwise it first makes an attempt that a
// cancellation does not cut short). Then Client makes attempts, waits
// and releases on the caller's goroutine: a grant reaches the caller, and
// a release returns, with no goroutine to wake. Any other driver (lib/pq,
// an instrumenting wrapper) may outlast its ctx, and gets a worker.
func (b *backend) BoundsCalls() bool {
	if _, known := sqldialect.Known(b.db); !known {
		return false
	}
	b.mu.Lock()
	d := b.d
	b.mu.Unlock()
	return d != nil && d.waitFirst()
}

// EndsOnCancel implements driver.CancelBound: both drivers BoundsCalls
// knows also end a statement's I/O at once when its ctx is cancelled.
func (b *backend) EndsOnCancel() bool { return b.BoundsCalls() }

// discard closes conn without returning it to the pool: its session ends
// on the server, and every lock it held with it.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return sqldriver.ErrBadConn })
	_ = conn.Close()
}

func (b *backend) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	d, err := b.sessions(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	s, token, ok, err := b.try(ctx, d, r, true)
	if err != nil {
		return driver.Grant{}, err
	}
	if !ok {
		b.putBack(s)
		return driver.Grant{}, nil
	}
	return driver.Grant{Acquired: true, Token: token, Handle: s}, nil
}

// try makes one attempt for r on a spare session, or on a new one from
// the pool: when bounded, a bounded pool with every connection in use
// fails it with ErrPoolExhausted instead. It returns the session, with
// the lock when ok; on an error the session is gone. The attempt does not
// wait, so a cancellation does not cut it short (its outcome would be
// unknown, and the session lost for it); ctx's deadline does, which a
// deadline-bound call sets (see BoundsCalls): the session then ends, and
// whatever the attempt took with it.
func (b *backend) try(ctx context.Context, d dialect, r driver.Request, bounded bool) (*session, uint64, bool, error) {
	tctx, cancel := detached(ctx, cancelTimeout)
	defer cancel()
	if s := b.takeSpare(); s != nil {
		token, ok, err := d.try(tctx, s, r)
		if err == nil {
			return s, token, ok, nil
		}
		// Most likely a spare the server has closed meanwhile. Whatever
		// the attempt may have taken ends with the session (discard);
		// try again on a connection the pool checks.
		discard(s.conn)
	}
	if limit, full := b.poolFull(); bounded && full {
		return nil, 0, false, fmt.Errorf("%w: all %d connections are in use; raise db.SetMaxOpenConns or hold fewer locks", ErrPoolExhausted, limit)
	}
	conn, err := b.conn(ctx)
	if err != nil {
		return nil, 0, false, err
	}
	if d, err = b.checked(ctx, conn); err != nil {
		_ = conn.Close() // nothing ran on it but the check: back to the pool
		return nil, 0, false, err
	}
	s := &session{conn: conn}
	token, ok, err := d.try(tctx, s, r)
	if err != nil {
		discard(conn)
		return nil, 0, false, sqldialect.SchemaHint(err)
	}
	return s, token, ok, nil
}

func (b *backend) AcquireWait(ctx context.Context, r driver.Request) (driver.Grant, error) {
	d, err := b.sessions(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	if !d.waitFirst() {
		// Asking the session's id costs a round trip, which a lock that is
		// free need not pay: one attempt first.
		s, token, ok, err := b.try(ctx, d, r, false)
		if err != nil || ok {
			return driver.Grant{Acquired: ok, Token: token, Handle: s}, err
		}
		if d, err = b.sessions(ctx); err != nil { // as the try's check left it
			b.putBack(s)
			return driver.Grant{}, err
		}
		return b.wait(ctx, d, s, r)
	}
	if s := b.takeSpare(); s != nil {
		g, err := b.wait(ctx, d, s, r)
		if err == nil || ctx.Err() != nil {
			return g, err
		}
		// Most likely a spare the server has closed meanwhile (a wait that
		// failed otherwise is as well made again): once more, on a
		// connection the pool checks.
	}
	conn, err := b.conn(ctx)
	if err != nil {
		return driver.Grant{}, err
	}
	if d, err = b.checked(ctx, conn); err != nil {
		_ = conn.Close() // nothing ran on it but the check: back to the pool
		return driver.Grant{}, err
	}
	return b.wait(ctx, d, &session{conn: conn}, r)
}

// wait takes r in the server's queue on s, which holds no lock. The wait
// runs detached from ctx. When ctx ends, the wait's statement is
// interrupted from another connection, again until it returns (an
// interruption that comes before the statement starts is dropped); then,
// on s, whatever the session was granted meanwhile is given up, and s is
// closed: wait returns, not acquired and with nothing held, within
// endWithin and a round trip of ctx's end. When the server does not
// answer in time, the session is ended on the server instead (as a
// connection the server closes), or at last abandoned: its connection is
// closed, and the server ends the session when it sees that. On an error
// s is gone.
func (b *backend) wait(ctx context.Context, d dialect, s *session, r driver.Request) (driver.Grant, error) {
	id, err := d.sessionID(ctx, s)
	if err != nil {
		discard(s.conn)
		return driver.Grant{}, err
	}
	wctx, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	returned, ended := make(chan struct{}), make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(ended)
		cctx, cancel := context.WithTimeout(context.Background(), endWithin)
		defer cancel()
		if !interruptUntil(cctx, d, b.db, id, returned) {
			abandon()
		}
	})
	token, err := d.wait(wctx, s, r)
	close(returned)
	if !stop() {
		<-ended
		return b.endWait(ctx, d, s, id, r.Name, wctx.Err() != nil, err)
	}
	if err != nil {
		discard(s.conn)
		return driver.Grant{}, sqldialect.SchemaHint(err)
	}
	return driver.Grant{Acquired: true, Token: token, Handle: s}, nil
}

// interruptUntil interrupts session id's statement until returned is
// closed, and reports whether it was.
func interruptUntil(ctx context.Context, d dialect, db *sql.DB, id int64, returned <-chan struct{}) bool {
	for {
		if err := d.interrupt(ctx, db, id); err != nil {
			return false
		}
		t := time.NewTimer(interruptEvery)
		select {
		case <-returned:
			t.Stop()
			return true
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// interruptEvery is how often an interruption is sent again while the
// wait has not returned: it may have come before the wait's statement.
const interruptEvery = 10 * time.Millisecond

// endWait ends a wait whose ctx ended: when it returned (interrupted, or
// granted just before), s gives up whatever it holds and is closed, and
// the attempt is a plain miss; otherwise (abandoned), or when giving up
// fails, the session is ended on the server and the outcome is left to
// the caller's clean-up.
func (b *backend) endWait(ctx context.Context, d dialect, s *session, id int64, name string, abandoned bool, waitErr error) (driver.Grant, error) {
	if !abandoned {
		gctx, cancel := context.WithTimeout(context.Background(), dlock.CancelMargin-endWithin)
		err := d.giveUpAll(gctx, s, name)
		cancel()
		if err == nil {
			discard(s.conn) // its settings were the hold's
			return driver.Grant{}, nil
		}
	}
	discard(s.conn)
	ectx, cancel := context.WithTimeout(context.Background(), dlock.CancelMargin-endWithin)
	defer cancel()
	_ = d.endSession(ectx, b.db, id)
	return driver.Grant{}, errjoin.Join(ctx.Err(), waitErr)
}

// untilGone runs count, which counts the server's sessions with id, until
// it finds none, pausing a little longer each time: a session ended on the
// server is gone within moments.
func untilGone(ctx context.Context, db *sql.DB, count string, id int64) error {
	pause := 100 * time.Microsecond
	for {
		var n int
		if err := db.QueryRowContext(ctx, count, id).Scan(&n); err != nil || n == 0 {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 10*time.Millisecond)
	}
}

// Refresh pings the pinned connection, which also restarts the server's
// idle timer. A failed ping means the session, and the lock with it, may
// be gone: the connection is discarded and the lease reported not held.
func (b *backend) Refresh(ctx context.Context, h driver.Hold) error {
	s := h.Handle.(*session)
	if err := b.d.ping(ctx, s); err != nil {
		if ctx.Err() != nil {
			return err // slow, not necessarily gone: retried until the deadline
		}
		discard(s.conn)
		return fmt.Errorf("%w: session of %q ended: %w", dlock.ErrNotHeld, h.Name, err)
	}
	return nil
}

// Release unlocks on the hold's session and returns the connection to the
// pool (or keeps it a moment for the next hold, see putBack). When the unlock fails, the session is closed instead, which
// releases the lock (the server frees it when it sees the connection
// close, or at the session's idle timeout, the TTL): nothing is left to
// retry, so Release returns nil. An acquire whose outcome was unknown
// (nil Handle) already closed its session.
func (b *backend) Release(ctx context.Context, h driver.Hold) error {
	s, ok := h.Handle.(*session)
	if !ok {
		return nil
	}
	if s.dropped {
		return b.endDropped(ctx, s, h)
	}
	ok, err := b.d.release(ctx, s, h.Name)
	if err != nil {
		// Cut off, its outcome unknown: the session goes, and the lock
		// with it. The server sees that only when the connection's close
		// reaches it (late, on a slow link), so the release is confirmed
		// by ending the session from another connection.
		if s.id == 0 {
			s.id, _ = b.d.sessionID(canceled, s) // free with pgx; no I/O otherwise
		}
		s.dropped = true
		discard(s.conn)
		if ctx.Err() == nil {
			return b.endDropped(ctx, s, h)
		}
		return fmt.Errorf("advisory: release of %q cut off, its session not yet ended: %w", h.Name, err)
	}
	if !ok {
		discard(s.conn)
		return fmt.Errorf("%w: the session no longer held %q", dlock.ErrNotHeld, h.Name)
	}
	b.putBackWithin(ctx, s)
	return nil
}

// canceled is an ended ctx, for a call that must not do I/O.
var canceled = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// endDropped confirms the release of h, whose session s was dropped
// after a release on it was cut off: it ends the session on the server,
// found by its id or by h's holder row, and waits until it is gone. When
// that cannot be done within ctx (a link too slow to open a connection
// in time), it logs so and reports the release done all the same: the
// connection is closed, so the server ends the session when the close
// reaches it, or at the session's idle timeout (the TTL) at the latest.
func (b *backend) endDropped(ctx context.Context, s *session, h driver.Hold) error {
	id := s.id
	var err error
	if id == 0 {
		id, err = b.d.holderSession(ctx, b.db, h)
	}
	if err == nil && id != 0 {
		err = b.d.endSession(ctx, b.db, id)
	}
	if err != nil {
		b.log.Warn("advisory: a release was cut off and its session's end could not be confirmed; the server ends it when the connection's close reaches it, or at its idle timeout", "name", h.Name, "err", err)
	}
	return nil
}

// A MySQL session released with its idle timeout still set for a hold is
// kept as a spare for a while instead of going back to the pool at once:
// the Locker's next hold takes it and sets nothing, which saves that hold
// a statement and the release the one that would restore the timeout.
// Spares are few and short-lived, well within the shortest idle timeout
// (1 s), and never the last free connection of a bounded pool.
const (
	maxSpares   = 2
	spareLinger = 100 * time.Millisecond
)

// putBack returns s, which holds no lock, to the pool, or keeps it as a
// spare (see maxSpares).
func (b *backend) putBack(s *session) { b.putBackWithin(context.Background(), s) }

// putBackWithin is putBack with the settings restored, if need be, by
// ctx's deadline (a release's; its cancellation does not count), or
// within cancelTimeout.
func (b *backend) putBackWithin(ctx context.Context, s *session) {
	if s.timeout != 0 {
		b.mu.Lock()
		if _, full := b.poolFull(); len(b.spares) < maxSpares && !full {
			b.spares = append(b.spares, s)
			s.spareTimer = time.AfterFunc(spareLinger, func() { b.dropSpare(s) })
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
	}
	b.closeWithin(ctx, s)
}

// poolFull reports whether db's pool is bounded and has every connection
// in use, and the bound (0: none): db's own (SetMaxOpenConns), or, for a
// db over a pgxpool, the pgxpool's (MaxConns), where the application's
// own users of the pool count too.
func (b *backend) poolFull() (limit int, full bool) {
	if b.pool != nil {
		st := b.pool.Stat()
		return int(st.MaxConns()), st.AcquiredConns()+st.ConstructingConns() >= st.MaxConns()
	}
	st := b.db.Stats()
	return st.MaxOpenConnections, st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections
}

// conn takes a connection from the pool for a session. When ctx ends
// while every connection is in use, the error wraps
// driver.ErrNoConnection: nothing was sent.
func (b *backend) conn(ctx context.Context) (*sql.Conn, error) {
	conn, err := b.db.Conn(ctx)
	if err != nil && ctx.Err() != nil {
		if limit, full := b.poolFull(); full {
			knob := "db.SetMaxOpenConns"
			if b.pool != nil {
				knob = "the pgxpool's MaxConns"
			}
			return nil, fmt.Errorf("%w: all %d connections were in use (%s): %w", driver.ErrNoConnection, limit, knob, err)
		}
	}
	return conn, err
}

// takeSpare returns the spare released last, or nil.
func (b *backend) takeSpare() *session {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(b.spares)
	if n == 0 {
		return nil
	}
	s := b.spares[n-1]
	b.spares = b.spares[:n-1]
	s.spareTimer.Stop() // if it fired, dropSpare finds s taken
	return s
}

// dropSpare returns s to the pool unless it was taken meanwhile.
func (b *backend) dropSpare(s *session) {
	b.mu.Lock()
	i := slices.Index(b.spares, s)
	if i >= 0 {
		b.spares = slices.Delete(b.spares, i, i+1)
	}
	b.mu.Unlock()
	if i >= 0 {
		b.close(s)
	}
}

// dropSpares returns every spare to the pool.
func (b *backend) dropSpares() {
	b.mu.Lock()
	spares := b.spares
	b.spares = nil
	b.mu.Unlock()
	for _, s := range spares {
		s.spareTimer.Stop()
		b.close(s)
	}
}

// close restores s's settings and returns it to the pool; a session whose
// settings cannot be restored is discarded.
func (b *backend) close(s *session) { b.closeWithin(context.Background(), s) }

// closeWithin is close with the settings restored by ctx's deadline, or
// within cancelTimeout.
func (b *backend) closeWithin(ctx context.Context, s *session) {
	if s.timeout != 0 { // else nothing to restore (see dialect.restore)
		rctx, cancel := detached(ctx, cancelTimeout)
		err := b.d.restore(rctx, s)
		cancel()
		if err != nil {
			discard(s.conn)
			return
		}
	}
	_ = s.conn.Close() // it fails only when already closed
}

// detached is ctx without its cancellation, for a statement that must not
// be cut midway, ending at ctx's deadline or after limit, whichever comes
// first: a deadline-bound caller (see BoundsCalls) sets one it must keep.
func detached(ctx context.Context, limit time.Duration) (context.Context, context.CancelFunc) {
	end := time.Now().Add(limit)
	if d, ok := ctx.Deadline(); ok && d.Before(end) {
		end = d
	}
	return context.WithDeadline(context.WithoutCancel(ctx), end)
}

// Transfer hands h's lock to r.Owner without letting go of it: the
// session keeps the server's lock, and the hold (its Handle) moves to the
// new owner with a new token, recorded in one statement on the session.
func (b *backend) Transfer(ctx context.Context, h driver.Hold, r driver.Request) (driver.Grant, error) {
	s, ok := h.Handle.(*session)
	if !ok || r.TTL != h.TTL || r.Name != h.Name {
		return driver.Grant{}, nil // the session's idle timeout is h's TTL
	}
	token, ok, err := b.d.transfer(ctx, s, h, r)
	if err != nil || !ok {
		return driver.Grant{}, err
	}
	return driver.Grant{Acquired: true, Token: token, Handle: s}, nil
}

func (b *backend) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	d, err := b.dialect(ctx)
	if err != nil {
		return dlock.Holder{}, false, err
	}
	h, ok, err := d.holder(ctx, b.db, name)
	return h, ok, sqldialect.SchemaHint(err)
}

// MaxTTL is MaxTTL: a held session's idle timeout is its lease.
func (b *backend) MaxTTL() time.Duration { return MaxTTL }

// millis is d as idle_session_timeout takes it: whole milliseconds,
// rounded up.
func millis(d time.Duration) int64 { return timeunit.Ceil(d, time.Millisecond) }

// Record implements dlock.Recorder in the dlock_records table (MySQL
// migration 000010, PostgreSQL 000007).
func (b *backend) Record(ctx context.Context, name string, token uint64, value []byte) error {
	return sqlrecord.Write(ctx, b.db, name, token, value)
}

// Recorded implements dlock.Recorder.
func (b *backend) Recorded(ctx context.Context, name string) (dlock.Record, bool, error) {
	return sqlrecord.Read(ctx, b.db, name)
}
