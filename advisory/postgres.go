package advisory

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/sqldialect"
)

// The holder's token and owner ride in the session's application_name, so
// Inspect (and a DBA, in pg_stat_activity) can see them without a write.
// PostgreSQL keeps at most 63 bytes of printable ASCII there.
const pgHolderExpr = `left('dlock ' || token || ' ' || $3::text, 63)`

// pgTry takes the lock without waiting; only then does it draw a token and
// set the session's idle timeout (the lease's TTL) and application_name,
// returning their previous values for pgRelease to put back. Each CTE
// reads the one before, which fixes the order: settings read, lock, token,
// settings written.
const pgTry = `
WITH c AS MATERIALIZED (SELECT current_setting('idle_session_timeout') AS idle, current_setting('application_name') AS app),
l AS MATERIALIZED (SELECT pg_try_advisory_lock($1) AS ok, idle, app FROM c),
t AS MATERIALIZED (SELECT CASE WHEN ok THEN ` + pgClock + ` END AS token, idle, app FROM l)
SELECT token, idle, app,
	CASE WHEN token IS NOT NULL THEN set_config('idle_session_timeout', $2, false) END,
	CASE WHEN token IS NOT NULL THEN set_config('application_name', ` + pgHolderExpr + `, false) END
FROM t`

// pgClock is the token of a grant: the server's clock in microseconds
// (see the package doc).
const pgClock = sqldialect.PostgresClockMicros

// pgWait is pgTry waiting in the server's lock queue.
const pgWait = `
WITH c AS MATERIALIZED (SELECT current_setting('idle_session_timeout') AS idle, current_setting('application_name') AS app),
l AS MATERIALIZED (SELECT pg_advisory_lock($1), idle, app FROM c),
t AS MATERIALIZED (SELECT ` + pgClock + ` AS token, idle, app FROM l)
SELECT token, idle, app,
	set_config('idle_session_timeout', $2, false),
	set_config('application_name', ` + pgHolderExpr + `, false)
FROM t`

// pgTransfer gives the lock the session holds to another owner: a new
// token, larger than the last ($1), and the owner's tag ($3) in
// application_name, as pgTry writes them; the idle timeout is set to the
// new lease's ($2) as well. A session holds its advisory lock until it
// unlocks or ends, so a session that runs the statement still holds it.
const pgTransfer = `
SELECT token, set_config('idle_session_timeout', $2, false), set_config('application_name', ` + pgHolderExpr + `, false)
FROM (SELECT GREATEST(` + pgClock + `, $1::bigint + 1) AS token) t`

// pgRelease unlocks and puts the session's settings back as they were
// before the lock, before the connection returns to the pool.
const pgRelease = `
SELECT pg_advisory_unlock($1), set_config('idle_session_timeout', $2, false), set_config('application_name', $3, false)`

// pgHolder finds the session holding a key. Bigint keys show in pg_locks
// as classid (high 32 bits), objid (low 32 bits) and objsubid 1.
const pgHolder = `
SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
	AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
	AND l.classid = $1 AND l.objid = $2
ORDER BY a.application_name LIKE 'dlock %' DESC
LIMIT 1`

// postgres is PostgreSQL's statements. pgx tells a session's id (its
// backend's pid) without asking the server.
type postgres struct{ pgx bool }

// waitFirst: with pgx a wait costs no round trip more than try.
func (p postgres) waitFirst() bool { return p.pgx }

func (postgres) try(ctx context.Context, s *session, r driver.Request) (uint64, bool, error) {
	var token sql.NullInt64
	err := sqldialect.QueryRow(ctx, s.conn, pgTry, []any{PostgresKey(r.Name), strconv.FormatInt(millis(r.TTL), 10), holderTag(r.Owner)},
		&token, &s.saved[0], &s.saved[1], nil, nil)
	if err != nil {
		return 0, false, err
	}
	return uint64(token.Int64), token.Valid, nil
}

func (postgres) wait(ctx context.Context, s *session, r driver.Request) (uint64, error) {
	var token int64
	err := sqldialect.QueryRow(ctx, s.conn, pgWait, []any{PostgresKey(r.Name), strconv.FormatInt(millis(r.TTL), 10), holderTag(r.Owner)},
		&token, &s.saved[0], &s.saved[1], nil, nil)
	return uint64(token), err
}

func (postgres) transfer(ctx context.Context, s *session, h driver.Hold, r driver.Request) (uint64, bool, error) {
	var token int64
	err := sqldialect.QueryRow(ctx, s.conn, pgTransfer, []any{int64(h.Token), strconv.FormatInt(millis(r.TTL), 10), holderTag(r.Owner)},
		&token, nil, nil)
	return uint64(token), err == nil, err
}

func (postgres) sessionID(ctx context.Context, s *session) (int64, error) {
	var pid int64
	err := s.conn.Raw(func(dc any) error {
		if c, ok := dc.(*stdlib.Conn); ok {
			pid = int64(c.Conn().PgConn().PID())
		}
		return nil
	})
	if err == nil && pid == 0 { // another driver: ask the session
		err = s.conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid)
	}
	return pid, err
}

func (postgres) interrupt(ctx context.Context, db *sql.DB, pid int64) error {
	_, err := db.ExecContext(ctx, "SELECT pg_cancel_backend($1)", pid)
	return err
}

func (postgres) giveUpAll(ctx context.Context, s *session, _ string) error {
	_, err := s.conn.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
	return err
}

// endSession terminates the backend and waits until it has left
// pg_stat_activity, which it does after releasing its locks.
// (pg_terminate_backend's own wait polls every 100 ms.)
func (postgres) endSession(ctx context.Context, db *sql.DB, pid int64) error {
	if _, err := db.ExecContext(ctx, "SELECT pg_terminate_backend($1)", pid); err != nil {
		return err
	}
	return untilGone(ctx, db, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid)
}

// holderSession: pgx names every session (sessionID), and another
// driver's cannot be told from the lock alone.
func (postgres) holderSession(context.Context, *sql.DB, driver.Hold) (int64, error) {
	return 0, nil
}

func (postgres) ping(ctx context.Context, s *session) error {
	_, err := s.conn.ExecContext(ctx, "SELECT 1")
	return err
}

func (postgres) release(ctx context.Context, s *session, name string) (bool, error) {
	var ok bool
	err := sqldialect.QueryRow(ctx, s.conn, pgRelease, []any{PostgresKey(name), s.saved[0], s.saved[1]}, &ok, nil, nil)
	return ok, err
}

// restore has nothing to do: pgRelease restored the settings.
func (postgres) restore(context.Context, *session) error { return nil }

func (postgres) holder(ctx context.Context, db *sql.DB, name string) (dlock.Holder, bool, error) {
	key := uint64(PostgresKey(name))
	var app string
	err := db.QueryRowContext(ctx, pgHolder, int64(key>>32), int64(key&0xffffffff)).Scan(&app)
	if errors.Is(err, sql.ErrNoRows) {
		return dlock.Holder{}, false, nil
	}
	if err != nil {
		return dlock.Holder{}, false, err
	}
	return parseHolder(app), true, nil
}

// holderTag is what application_name carries of an owner id "LABEL#HOLD":
// "HOLD LABEL", the hold id first, so the 63 bytes PostgreSQL keeps cut
// the label, not the hold id.
func holderTag(owner string) string {
	i := strings.LastIndexByte(owner, '#')
	if i < 0 {
		return owner
	}
	return owner[i+1:] + " " + owner[:i]
}

// parseHolder reads "dlock TOKEN HOLD LABEL" from an application_name (the
// label possibly cut short); a session that holds the key without it (the
// application's own lock, or LockTx) has an unknown owner and token 0.
func parseHolder(app string) dlock.Holder {
	rest, ok := strings.CutPrefix(app, "dlock ")
	if !ok {
		return dlock.Holder{}
	}
	tok, tag, _ := strings.Cut(rest, " ")
	token, _ := strconv.ParseUint(tok, 10, 64)
	owner := tag
	if hold, label, ok := strings.Cut(tag, " "); ok {
		owner = label + "#" + hold
	}
	return dlock.Holder{Owner: owner, Token: token}
}
