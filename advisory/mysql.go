package advisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// myTry takes the lock without waiting and, in the same statement, draws
// the name's next token and records the holder: the INSERT runs only if
// GET_LOCK returned 1, and LAST_INSERT_ID(expr) returns the token in the
// reply. No rows affected means another session holds the lock. Tokens
// are a hybrid clock, max(last + 1, the server's clock in µs), so a row
// can be deleted (Prune) without its name's tokens going back.
const myTry = `
INSERT INTO dlock_fences (name, owner, session, token)
SELECT ?, ?, CONNECTION_ID(), LAST_INSERT_ID(` + myClock + `) FROM DUAL WHERE GET_LOCK(?, 0) = 1
ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(GREATEST(token + 1, ` + myClock + `)), owner = VALUES(owner), session = VALUES(session)`

// myClock is the server's clock in microseconds since the epoch, read
// when it is evaluated (SYSDATE), not when the statement started (NOW):
// in myTry and myTransfer it is read after GET_LOCK granted the lock, so
// after the last holder's release, whose row may be gone with it (see
// myReleaseCall), and so after that holder's token was drawn.
const myClock = `CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS UNSIGNED)`

// myWait waits in the server's queue. MariaDB takes no negative
// (infinite) timeout; a year is as good.
const myWait = `SELECT GET_LOCK(?, 31536000)`

// myFence draws the token after myWait got the lock.
const myFence = `
INSERT INTO dlock_fences (name, owner, session, token) VALUES (?, ?, CONNECTION_ID(), LAST_INSERT_ID(` + myClock + `))
ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(GREATEST(token + 1, ` + myClock + `)), owner = VALUES(owner), session = VALUES(session)`

// myTransfer draws a new token for a new owner on a session that holds
// the lock (see myTry); no rows affected when it no longer does.
const myTransfer = `
INSERT INTO dlock_fences (name, owner, session, token)
SELECT ?, ?, CONNECTION_ID(), LAST_INSERT_ID(` + myClock + `) FROM DUAL WHERE IS_USED_LOCK(?) = CONNECTION_ID()
ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(GREATEST(token + 1, ` + myClock + `)), owner = VALUES(owner), session = VALUES(session)`

// myHolder reads the holder row if its session still holds the lock.
const myHolder = `SELECT owner, token FROM dlock_fences WHERE name = ? AND session = IS_USED_LOCK(?)`

// myWaitCall sets the session's idle timeout, waits in the server's queue
// and then draws the token as myFence does, in one round trip (migration
// 000005): lock name, holder row name, owner, idle timeout in seconds.
const myWaitCall = `CALL dlock_wait_lock(?, ?, ?, ?)`

// myReleaseCall deletes the session's holder row and releases the lock
// in one round trip (migration 000009): lock name, holder row name. A name
// leaves nothing behind once unlocked.
const myReleaseCall = `CALL dlock_release_lock(?, ?)`

// myReleaseRow is myReleaseCall's first half, where it cannot be called,
// and what a wait interrupted after its grant gives up (giveUpAll).
const myReleaseRow = `DELETE FROM dlock_fences WHERE name = ? AND session = CONNECTION_ID()`

// The statements of a hold run with their arguments inlined
// (sqldialect.MySQLInline): one round trip each, where a prepared
// statement takes two.
type mysql struct {
	// noCall is set once dlock_wait_lock turned out to be missing or not
	// for this user to run: waits then take myWait and myFence.
	noCall atomic.Bool
	// noReleaseCall is the same for dlock_release_lock: releases then take
	// myReleaseRow and RELEASE_LOCK.
	noReleaseCall atomic.Bool
	log           *slog.Logger
}

// fencesChecked holds each *sql.DB whose dlock_fences warnMemoryFences
// has looked at, weakly: an entry goes with its *sql.DB.
var fencesChecked sync.Map // weak.Pointer[sql.DB] → struct{}

// myFencesEngine is whether the server writes a binary log, and the
// engine of dlock_fences (NULL: no such table).
const myFencesEngine = `
SELECT @@log_bin, (SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'dlock_fences')`

// warnMemoryFences logs a warning, once per *sql.DB, when dlock_fences
// is a MEMORY table on a server that writes a binary log: a replica that
// restarts loses the table's rows, and the primary's next write to one
// of them stops its replication (see MySQL migration 000006, whose
// dlock_fences_engine puts the table in InnoDB there). Nothing else
// depends on the answer, so a question that fails is not asked again.
func warnMemoryFences(ctx context.Context, db *sql.DB, log *slog.Logger) {
	key := weak.Make(db)
	if _, asked := fencesChecked.LoadOrStore(key, struct{}{}); asked {
		return
	}
	runtime.AddCleanup(db, func(key weak.Pointer[sql.DB]) { fencesChecked.Delete(key) }, key)
	var (
		logBin int
		engine sql.NullString
	)
	if err := db.QueryRowContext(ctx, myFencesEngine).Scan(&logBin, &engine); err != nil {
		return
	}
	if logBin == 1 && strings.EqualFold(engine.String, "MEMORY") {
		log.Warn("advisory: dlock_fences is a MEMORY table on a server that writes a binary log: a replica that restarts loses its rows, and its replication then stops at the next lock of one of their names (error 1032); apply MySQL migrations 000006 and 000007, or CALL dlock_fences_engine() if they are")
	}
}

// seconds is ttl as wait_timeout, whole seconds rounded up.
func seconds(ttl time.Duration) int64 { return timeunit.Ceil(ttl, time.Second) }

// fence runs myTry or myTransfer for r on s: the token, and whether the
// holder row was written (the session holds the lock).
func fence(ctx context.Context, s *session, stmt string, r driver.Request) (uint64, bool, error) {
	res, err := s.conn.ExecContext(ctx, sqldialect.MySQLInline(stmt, r.Name, r.Owner, MySQLName(r.Name)))
	if err != nil {
		return 0, false, err
	}
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, false, err
	}
	token, err := res.LastInsertId()
	return uint64(token), err == nil, err
}

func (m *mysql) try(ctx context.Context, s *session, r driver.Request) (uint64, bool, error) {
	token, ok, err := fence(ctx, s, myTry, r)
	if err != nil || !ok {
		return 0, false, err
	}
	return token, true, m.setTimeout(ctx, s, r.TTL)
}

// setTimeout makes ttl s's idle timeout, unless it already is (a spare
// session, see backend.putBack).
func (*mysql) setTimeout(ctx context.Context, s *session, ttl time.Duration) error {
	sec := seconds(ttl)
	if s.timeout == sec {
		return nil
	}
	if _, err := s.conn.ExecContext(ctx, fmt.Sprintf("SET SESSION wait_timeout = %d", sec)); err != nil {
		return err
	}
	s.timeout = sec
	return nil
}

// waitFirst holds while dlock_wait_lock can be called: it sets the idle
// timeout and takes a free lock in one round trip, as try does, and a
// session's id, asked once, serves it for its spare's life.
func (m *mysql) waitFirst() bool { return !m.noCall.Load() }

func (m *mysql) wait(ctx context.Context, s *session, r driver.Request) (uint64, error) {
	conn, name := s.conn, r.Name
	// The idle timeout is set before the wait (a session that runs a
	// statement is not idle), so that only the token is left to draw after
	// the server's grant: dlock_wait_lock sets the timeout, waits and draws
	// the token in one round trip; without it, the timeout, the wait and
	// myFence take a statement each. A wait that fails discards the
	// session.
	if !m.noCall.Load() {
		sec := seconds(r.TTL)
		var token sql.NullInt64
		err := conn.QueryRowContext(ctx, sqldialect.MySQLInline(myWaitCall, MySQLName(name), name, r.Owner, sec)).Scan(&token)
		if !m.refused(err, &m.noCall, "dlock_wait_lock cannot be called (MySQL migration 000005, or EXECUTE on it): a contended grant takes a round trip more until it can") {
			if err != nil {
				return 0, err
			}
			s.timeout = sec
			if !token.Valid {
				return 0, waitEnded(name)
			}
			return uint64(token.Int64), nil
		}
	}
	if err := m.setTimeout(ctx, s, r.TTL); err != nil {
		return 0, err
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, sqldialect.MySQLInline(myWait, MySQLName(name))).Scan(&got); err != nil {
		return 0, err
	}
	if !got.Valid || got.Int64 != 1 {
		// 0 is a timeout, NULL an error or a killed wait: either way the
		// lock was not taken.
		return 0, waitEnded(name)
	}
	res, err := conn.ExecContext(ctx, sqldialect.MySQLInline(myFence, name, r.Owner))
	if err != nil {
		return 0, err
	}
	token, err := res.LastInsertId()
	return uint64(token), err
}

// waitEnded is the error of a wait in the server's queue that ended
// without the lock.
func waitEnded(name string) error {
	return fmt.Errorf("advisory: %q: the server's wait for the lock ended without it", name)
}

// refused reports whether err says a procedure does not exist (a MySQL
// migration not applied: error 1305) or may not be run by this user
// (1370), and if so sets flag, once, logging what it costs. The server
// refuses the call before it runs, so nothing was done.
func (m *mysql) refused(err error, flag *atomic.Bool, cost string) bool {
	var my *mysqldrv.MySQLError
	if !errors.As(err, &my) || my.Number != 1305 && my.Number != 1370 {
		return false
	}
	if !flag.Swap(true) {
		m.log.Warn("advisory: "+cost, "err", err)
	}
	return true
}

func (*mysql) transfer(ctx context.Context, s *session, h driver.Hold, r driver.Request) (uint64, bool, error) {
	token, ok, err := fence(ctx, s, myTransfer, r)
	if ok && token <= h.Token {
		return 0, false, fmt.Errorf("advisory: %q: token %d after %d", r.Name, token, h.Token)
	}
	return token, ok, err
}

func (*mysql) sessionID(ctx context.Context, s *session) (int64, error) {
	if s.id != 0 {
		return s.id, nil
	}
	err := s.conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&s.id)
	return s.id, err
}

func (*mysql) interrupt(ctx context.Context, db *sql.DB, id int64) error {
	_, err := db.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id))
	return err
}

// giveUpAll deletes the session's holder row of name and releases every
// lock of the session (RELEASE_ALL_LOCKS: MySQL 5.7, MariaDB 10.5).
func (*mysql) giveUpAll(ctx context.Context, s *session, name string) error {
	if _, err := s.conn.ExecContext(ctx, sqldialect.MySQLInline(myReleaseRow, name)); err != nil {
		return err
	}
	_, err := s.conn.ExecContext(ctx, "DO RELEASE_ALL_LOCKS()")
	return err
}

// endSession kills the session and waits until it has left the process
// list: KILL returns as soon as it has flagged the session, which releases
// its locks as it unwinds, before it leaves the list. A session already
// gone is ended.
func (*mysql) endSession(ctx context.Context, db *sql.DB, id int64) error {
	if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err != nil {
		if me := (*mysqldrv.MySQLError)(nil); errors.As(err, &me) && me.Number == 1094 {
			return nil // "Unknown thread id": gone already
		}
		return err
	}
	return untilGone(ctx, db, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", id)
}

// holderSession reads h's holder row, while its session holds the lock.
func (*mysql) holderSession(ctx context.Context, db *sql.DB, h driver.Hold) (int64, error) {
	var id int64
	err := db.QueryRowContext(ctx, `SELECT session FROM dlock_fences WHERE name = ? AND owner = ? AND token = ? AND session = IS_USED_LOCK(?)`,
		h.Name, h.Owner, h.Token, MySQLName(h.Name)).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return id, err
}

func (*mysql) ping(ctx context.Context, s *session) error {
	_, err := s.conn.ExecContext(ctx, "DO 1")
	return err
}

// release leaves the idle timeout set: the session may serve the next
// hold as it is (backend.putBack), or restore puts it back.
// Its holder row goes with the lock, so a name leaves nothing behind.
func (m *mysql) release(ctx context.Context, s *session, name string) (bool, error) {
	var released sql.NullInt64
	if !m.noReleaseCall.Load() {
		err := s.conn.QueryRowContext(ctx, sqldialect.MySQLInline(myReleaseCall, MySQLName(name), name)).Scan(&released)
		if !m.refused(err, &m.noReleaseCall, "dlock_release_lock cannot be called (MySQL migration 000009, or EXECUTE on it): a release takes a round trip more until it can") {
			return released.Int64 == 1, err
		}
	}
	if _, err := s.conn.ExecContext(ctx, sqldialect.MySQLInline(myReleaseRow, name)); err != nil {
		return false, err
	}
	err := s.conn.QueryRowContext(ctx, sqldialect.MySQLInline("SELECT RELEASE_LOCK(?)", MySQLName(name))).Scan(&released)
	return released.Int64 == 1, err
}

func (*mysql) restore(ctx context.Context, s *session) error {
	if s.timeout == 0 {
		return nil
	}
	if _, err := s.conn.ExecContext(ctx, "SET SESSION wait_timeout = @@GLOBAL.wait_timeout"); err != nil {
		return err
	}
	s.timeout = 0
	return nil
}

func (*mysql) holder(ctx context.Context, db *sql.DB, name string) (dlock.Holder, bool, error) {
	var h dlock.Holder
	err := db.QueryRowContext(ctx, myHolder, name, MySQLName(name)).Scan(&h.Owner, &h.Token)
	if errors.Is(err, sql.ErrNoRows) {
		var used sql.NullInt64
		if err := db.QueryRowContext(ctx, "SELECT IS_USED_LOCK(?)", MySQLName(name)).Scan(&used); err != nil {
			return dlock.Holder{}, false, err
		}
		// Held without a holder row: by a session outside dlock.
		return dlock.Holder{}, used.Valid, nil
	}
	return h, err == nil, err
}
