package tablelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// myAcquire inserts the row, takes over an expired one, or takes again one
// the owner holds (an owner id is one hold's: that is a retried attempt
// whose reply was lost, not counted twice; see pgTake), in one statement.
// ON DUPLICATE KEY UPDATE assigns left to right and later expressions see
// earlier results, so owner is decided first; after it,
// "owner = VALUES(owner)" means the lock is ours. The
// token comes back through LAST_INSERT_ID(expr), which the server returns
// in the statement's reply as the insert id: the token when acquired, 0
// when another owner holds the lock. Times are UTC_TIMESTAMP(6), which no
// session time zone changes. A row is live while expires_at is in the
// future; release sets it to the epoch, so a free row is expired even for
// a statement that started before the release and waited for its row lock.
// Comparisons of owner are NULL-safe (<=>): a NULL must not pick IF's else.
//
// A failed attempt also stamps waited_at, which
// myTransfer reads: waiters poll, and would rarely find the lock free if
// the holder's process handed it on between its own goroutines. The stamp
// is renewed only when it is older than half of waitedWindow, so that
// polling waiters write (and flush the log for) the row at most twice a
// second between them.
const myAcquire = `
INSERT INTO dlock_locks (name, owner, reentry, token, acquired_at, expires_at, payload)
VALUES (?, ?, 1, LAST_INSERT_ID(` + myClock + `), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, NULLIF(?, ''))
ON DUPLICATE KEY UPDATE
	owner       = IF(expires_at <= UTC_TIMESTAMP(6) OR owner <=> VALUES(owner), VALUES(owner), owner),
	token       = IF(NOT owner <=> VALUES(owner), token + LAST_INSERT_ID(0),
	              IF(expires_at <= UTC_TIMESTAMP(6), LAST_INSERT_ID(GREATEST(token + 1, ` + myClock + `)), LAST_INSERT_ID(token))),
	reentry     = IF(NOT owner <=> VALUES(owner), reentry, IF(expires_at <= UTC_TIMESTAMP(6), 1, GREATEST(reentry, 1))),
	acquired_at = IF(owner <=> VALUES(owner) AND expires_at <= UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), acquired_at),
	payload     = IF(owner <=> VALUES(owner) AND expires_at <= UTC_TIMESTAMP(6), VALUES(payload), payload),
	expires_at  = IF(owner <=> VALUES(owner), GREATEST(expires_at, VALUES(expires_at)), expires_at),
	waited_at   = IF(owner <=> VALUES(owner) OR waited_at > UTC_TIMESTAMP(6) - INTERVAL 500000 MICROSECOND, waited_at, UTC_TIMESTAMP(6))`

// myClock is the server's clock in µs: a new hold's token is the larger
// of the last token + 1 and it (see pgClock).
const myClock = sqldialect.MySQLClockMicros

// myRefresh extends a hold; the token pins it to one hold of the owner.
const myRefresh = `
UPDATE dlock_locks SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
WHERE name = ? AND owner = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)`

// myHeld confirms a hold when an UPDATE reported no changed rows: MySQL
// counts changed rows, not matched ones, unless the DSN sets clientFoundRows.
const myHeld = `
SELECT 1 FROM dlock_locks
WHERE name = ? AND owner = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)`

// myRelease leaves one hold; the last one frees the row (owner NULL,
// expires_at the epoch). Assignments see earlier ones, so owner and
// expires_at test the decremented reentry. Token 0 matches the owner's
// hold whatever its token (see pgRelease).
const myRelease = `
UPDATE dlock_locks SET
	reentry    = reentry - 1,
	owner      = IF(reentry = 0, NULL, owner),
	payload    = IF(reentry = 0, NULL, payload),
	expires_at = IF(reentry = 0, '1970-01-01', expires_at)
WHERE name = ? AND owner = ? AND (token = ? OR ? = 0) AND expires_at > UTC_TIMESTAMP(6)`

// myTransfer hands a hold, the only one of its owner, to another owner
// with the next token, returned as the insert id (see myAcquire). No row
// changes when the hold is gone or re-entered, or when a waiter of
// another hold asked for the lock in the last window (the last
// parameter, see mysql.window): that hold is then released, so the
// waiter can find the lock free.
const myTransfer = `
UPDATE dlock_locks SET
	owner       = ?,
	payload     = NULLIF(?, ''),
	token       = LAST_INSERT_ID(GREATEST(token + 1, ` + myClock + `)),
	acquired_at = UTC_TIMESTAMP(6),
	expires_at  = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ? AND owner = ? AND token = ? AND reentry = 1 AND expires_at > UTC_TIMESTAMP(6)
	AND (waited_at IS NULL OR waited_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND)`

// waitedWindow is how recent a waiter's attempt (waited_at) keeps a
// Locker from handing the lock on: longer than a waiter's pause between
// attempts (dlock's default backoff caps it at 250ms).
const waitedWindow = time.Second

// missesKept is how many names' last missed attempts a Locker keeps
// before it first forgets those older than waitedWindow; after that, it
// forgets them whenever the names it keeps have doubled since.
const missesKept = 256

const myInspect = `
SELECT owner, token, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), IFNULL(payload, ''),
	IFNULL(TIMESTAMPDIFF(MICROSECOND, acquired_at, UTC_TIMESTAMP(6)), 0)
FROM dlock_locks WHERE name = ? AND owner IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)`

// mysql runs its statements with their arguments inlined
// (sqldialect.MySQLInline): one round trip each, where a prepared
// statement takes two. A commit's log flush is the server's to decide:
// MariaDB and MySQL set innodb_flush_log_at_trx_commit for the whole
// server only, so a release cannot skip it as on PostgreSQL.
type mysql struct {
	db      *sql.DB
	log     *slog.Logger
	backoff dlock.Backoff // paces a room's poll

	mu sync.Mutex
	// misses is when an attempt of this Locker last found each name
	// held, as its reply came: that attempt may have stamped waited_at
	// (see window). At sweepAt names, the old ones are forgotten.
	misses  map[string]time.Time
	sweepAt int
}

// missed records that an attempt on name found it held, just now.
func (m *mysql) missed(name string) {
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.misses == nil {
		m.misses, m.sweepAt = map[string]time.Time{}, missesKept
	}
	if len(m.misses) >= m.sweepAt {
		for n, at := range m.misses {
			if now.Sub(at) >= waitedWindow {
				delete(m.misses, n)
			}
		}
		m.sweepAt = max(missesKept, 2*len(m.misses))
	}
	m.misses[name] = now
}

// window is how recent a waited_at stamp on name keeps this Locker from
// handing the lock on. A stamp is another waiter's when it is younger
// than waitedWindow, except that one may be this Locker's own: its
// waiters stamped the row while they waited for another holder, and
// that stamp, younger than a second when the lock came to them, must not
// stop their hand-offs. The server wrote it before the reply of this
// Locker's last missed attempt came, so it is at least as old as that
// reply: a stamp younger than the reply is another waiter's. A stamp
// older than it may be either, and is taken as this Locker's own; a
// waiter of another process hidden behind it stamps again with its first
// attempt after the stamp is half of waitedWindow old (myAcquire), and
// is seen then.
// The clocks compared are the server's and this process's over at most
// a second: a step of either only changes who waits a little longer.
func (m *mysql) window(name string) time.Duration {
	m.mu.Lock()
	at, ok := m.misses[name]
	m.mu.Unlock()
	if !ok {
		return waitedWindow
	}
	return min(waitedWindow, time.Since(at))
}

var (
	_ driver.Backend      = (*mysql)(nil)
	_ driver.Transferer   = (*mysql)(nil)
	_ driver.LiveNotifier = (*mysql)(nil)
	_ dlock.Inspector     = (*mysql)(nil)
)

// Subscribe puts r's waiter in the process's room for r.Name (see room):
// a release by a Locker on the same *sql.DB wakes it, and the room's poll
// stands in for a release by another process.
func (m *mysql) Subscribe(_ context.Context, r driver.Request) (<-chan struct{}, func(), error) {
	wake, cancel := subscribe(m.db, r, m.backoff)
	return wake, cancel, nil
}

// SubscribeLive is Subscribe, which needs no I/O.
func (m *mysql) SubscribeLive(r driver.Request) (<-chan struct{}, func(), bool) {
	wake, cancel := subscribe(m.db, r, m.backoff)
	return wake, cancel, true
}

func (m *mysql) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	res, err := m.db.ExecContext(ctx, sqldialect.MySQLInline(myAcquire, r.Name, r.Owner, micros(r.TTL), r.Payload))
	if err != nil {
		return driver.Grant{}, err
	}
	token, err := insertToken(res, r.Name)
	if err != nil {
		return driver.Grant{}, err
	}
	if token == 0 {
		m.missed(r.Name)
	}
	// The holder's remaining lease would cost a second round trip on every
	// poll; the backoff cap bounds the wait past an expiry instead.
	return driver.Grant{Acquired: token > 0, Token: uint64(token)}, nil
}

func (m *mysql) Refresh(ctx context.Context, h driver.Hold) error {
	res, err := m.db.ExecContext(ctx, sqldialect.MySQLInline(myRefresh, micros(h.TTL), h.Name, h.Owner, h.Token))
	if err != nil {
		return err
	}
	return m.changed(ctx, res, h)
}

func (m *mysql) Release(ctx context.Context, h driver.Hold) error {
	res, err := m.db.ExecContext(ctx, sqldialect.MySQLInline(myRelease, h.Name, h.Owner, h.Token, h.Token))
	if err != nil {
		return err
	}
	if err := m.changed(ctx, res, h); err != nil {
		return err
	}
	released(m.db, h.Name)
	return nil
}

func (m *mysql) Transfer(ctx context.Context, h driver.Hold, r driver.Request) (driver.Grant, error) {
	res, err := m.db.ExecContext(ctx, sqldialect.MySQLInline(myTransfer, r.Owner, r.Payload, micros(r.TTL), h.Name, h.Owner, h.Token, micros(m.window(h.Name))))
	if err != nil {
		return driver.Grant{}, err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return driver.Grant{}, err
	}
	token, err := insertToken(res, h.Name)
	if err == nil && token == 0 {
		err = fmt.Errorf("tablelock: %q: handed on without a token", h.Name)
	}
	if err != nil {
		return driver.Grant{}, err // the row may have changed hands: Client gives back what r.Owner holds
	}
	return driver.Grant{Acquired: true, Token: token}, nil
}

// insertToken is the token a statement returned as its insert id
// (LAST_INSERT_ID(expr)), 0 for none. The driver reads the unsigned id as
// an int64, so a token past 2^63-1 is an error; Client then gives back
// whatever the statement may have taken.
func insertToken(res sql.Result, name string) (uint64, error) {
	token, err := res.LastInsertId()
	if err != nil {
		return 0, err
	}
	if token < 0 {
		return 0, fmt.Errorf("tablelock: %q: the token passed 2^63-1; reset the row's token column", name)
	}
	return uint64(token), nil
}

// changed maps an UPDATE's result to nil or ErrNotHeld.
func (m *mysql) changed(ctx context.Context, res sql.Result, h driver.Hold) error {
	n, err := res.RowsAffected()
	if err != nil || n > 0 {
		return err
	}
	var one int
	err = m.db.QueryRowContext(ctx, sqldialect.MySQLInline(myHeld, h.Name, h.Owner, h.Token)).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return notHeld(h)
	}
	return err
}

func (m *mysql) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	var (
		h             dlock.Holder
		leftUS, ageUS int64
	)
	err := m.db.QueryRowContext(ctx, myInspect, name).Scan(&h.Owner, &h.Token, &leftUS, &h.Payload, &ageUS)
	if errors.Is(err, sql.ErrNoRows) {
		return dlock.Holder{}, false, nil
	}
	if err != nil {
		return dlock.Holder{}, false, err
	}
	h.TTL, h.Age = timeunit.Of(leftUS, time.Microsecond), timeunit.Of(ageUS, time.Microsecond)
	return h, true, nil
}
