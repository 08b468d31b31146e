package sqldialect

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// Pooler tells whether conn reaches PostgreSQL through a connection
// pooler (PgBouncer, pgcat, Odyssey, RDS Proxy): the server process its
// statement runs on (pg_backend_pid()) is not the process id the
// connection was given when it opened (BackendKeyData), which a pooler
// makes up for each of its clients. detail names both ids, for an error.
// known is false for a driver other than pgx's stdlib, which does not
// show the id it was given; then Pooler asks nothing.
//
// A pooler's mode is not visible to its clients: under PgBouncer's
// session pooling the connection keeps its server session, under
// transaction or statement pooling it does not.
func Pooler(ctx context.Context, conn *sql.Conn) (pooled bool, detail string, known bool, err error) {
	var given uint32
	var backend int64
	err = conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return nil
		}
		given = c.Conn().PgConn().PID()
		// The simple protocol prepares nothing: a named statement of
		// pgx's cache may be another client's on a pooler's session.
		return c.Conn().QueryRow(ctx, "SELECT pg_backend_pid()", pgx.QueryExecModeSimpleProtocol).Scan(&backend)
	})
	if err != nil || given == 0 {
		return false, "", given != 0, err
	}
	if backend == int64(given) {
		return false, "", true, nil
	}
	return true, fmt.Sprintf("statements run in server process %d, the connection was given process id %d", backend, given), true, nil
}

// PooledStatements is CheckPooledStatements's refusal for conn, which
// Pooler found behind a pooler (detail is its finding), or nil when pgx
// does not prepare named statements on it.
func PooledStatements(conn *sql.Conn, detail string) error {
	named := false
	if err := conn.Raw(func(dc any) error {
		if c, ok := dc.(*stdlib.Conn); ok {
			named = c.Conn().Config().DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
		}
		return nil
	}); err != nil || !named {
		return err
	}
	return pooledStatementsErr(detail)
}

func pooledStatementsErr(detail string) error {
	return fmt.Errorf("%w: a pooler stands between db and PostgreSQL (%s); set default_query_exec_mode=exec (or simple_protocol) in the DSN", ErrPooledStatements, detail)
}

// PoolerOf is Pooler for db, asked once on one of its connections and
// remembered: every connection of a *sql.DB goes to one address, so one
// tells for all. known is false for a driver Pooler does not know.
func PoolerOf(ctx context.Context, db *sql.DB) (pooled bool, detail string, known bool, err error) {
	if f, ok := poolers.load(db); ok {
		return f.pooled, f.detail, true, nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, "", false, err
	}
	defer func() { _ = conn.Close() }() // back to the pool
	pooled, detail, known, err = Pooler(ctx, conn)
	if err == nil && known {
		poolers.store(db, poolerFinding{pooled, detail})
	}
	return pooled, detail, known, err
}

// KnownPooler is what PoolerOf found for db, without I/O; known is false
// when it has not asked.
func KnownPooler(db *sql.DB) (pooled bool, detail string, known bool) {
	f, ok := poolers.load(db)
	return f.pooled, f.detail, ok
}

// poolers holds PoolerOf's findings.
var poolers perDB[poolerFinding]

// perDB remembers one finding for each *sql.DB, until the DB is
// collected.
type perDB[T any] struct{ m sync.Map } // weak.Pointer[sql.DB] → T

func (p *perDB[T]) load(db *sql.DB) (T, bool) {
	v, ok := p.m.Load(weak.Make(db))
	if !ok {
		var zero T
		return zero, false
	}
	return v.(T), true
}

// store keeps v for db, unless a finding is kept already.
func (p *perDB[T]) store(db *sql.DB, v T) {
	key := weak.Make(db)
	if _, loaded := p.m.LoadOrStore(key, v); !loaded {
		runtime.AddCleanup(db, func(key weak.Pointer[sql.DB]) { p.m.Delete(key) }, key)
	}
}

type poolerFinding struct {
	pooled bool
	detail string
}

// ErrPooledStatements is why CheckPooledStatements refuses a database.
var ErrPooledStatements = errors.New("pgx's prepared statements do not survive a connection pooler")

// CheckPooledStatements refuses db when pgx prepares named statements on
// its connections (default_query_exec_mode=cache_statement, pgx's
// default) and they reach PostgreSQL through a pooler: PgBouncer's
// transaction and statement pooling (before 1.21's
// max_prepared_statements) run the next statement on a server session
// that has another client's statements, or none of its own, and
// statements fail at random — a release among them. It asks the server
// only in that mode, on one of db's connections.
func CheckPooledStatements(ctx context.Context, db *sql.DB) error {
	pooled, detail, known, err := PoolerOf(ctx, db)
	if err != nil || !known || !pooled {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // back to the pool
	return PooledStatements(conn, detail)
}

// SharedSessions tells, for a driver Pooler does not know, whether conn's
// server session is another connection's too, as under a pooler's
// transaction or statement pooling: it sets a session setting on conn,
// and a statement on a second connection of db looks for it. A pooler
// hands the second connection the server session the first just freed,
// unless another client takes it meanwhile: a yes is certain, a no under
// load is not. Direct connections and session pooling answer no.
func SharedSessions(ctx context.Context, db *sql.DB, conn *sql.Conn) (shared bool, err error) {
	other, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = other.Close() }() // back to the pool
	for range sharedProbes {
		if shared, err = probeShared(ctx, conn, other); shared || err != nil {
			return shared, err
		}
	}
	return false, nil
}

// sharedProbes is how many times SharedSessions looks: another client
// that takes the freed server session in between hides it once, rarely
// three times.
const sharedProbes = 3

// probeShared sets a random session setting on conn and reads it on other.
func probeShared(ctx context.Context, conn, other *sql.Conn) (bool, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return false, err
	}
	probe := hex.EncodeToString(b[:])
	if _, err := conn.ExecContext(ctx, "SELECT set_config('dlock.pooler_probe', '"+probe+"', false)"); err != nil {
		return false, err
	}
	defer func() {
		_, _ = conn.ExecContext(ctx, "SELECT set_config('dlock.pooler_probe', '', false)") // wherever it lands
	}()
	var seen sql.NullString
	if err := other.QueryRowContext(ctx, "SELECT current_setting('dlock.pooler_probe', true)").Scan(&seen); err != nil {
		return false, err
	}
	return seen.String == probe, nil
}
