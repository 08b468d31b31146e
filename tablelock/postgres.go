package tablelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// notifyChannel is the LISTEN/NOTIFY channel of releases for every
// process, and for processes that queued without a channel of their own
// (an earlier version's); the payload is "<pid>/<name>", see
// parsePayload. A process queued with own_channel is notified on
// notifyChannel_<pid>, with the same payload.
const notifyChannel = "dlock_locks"

// pgAcquire inserts the row, takes over an expired one, or re-enters one
// the owner holds, in one statement. A row is live while expires_at > now();
// release sets expires_at to the epoch, so a free row is expired even for a
// statement whose now() is older than the release.
//
// The upsert runs only when the row, read without a lock, looks free or
// ours, and only for one contender at a time: ON CONFLICT DO UPDATE locks
// the row even when its WHERE fails, and a row lock makes the attempt a
// write transaction with a WAL flush at commit, which would queue the next
// release behind every waiter woken by the last one. The gate is a
// transaction-level advisory lock (no WAL, gone when the statement
// commits) on a hash of the name; CASE fixes the evaluation order. A
// collision only makes an attempt retry. Failed attempts stay read-only;
// the last SELECT reports the holder's remaining lease, or 1µs (retry at
// once) when the gate turned the attempt away, and for a hold taken,
// whether no process was queued for the name (see pgReleaseQuiet).
var pgAcquire = `
WITH cur AS (
	SELECT owner, token, expires_at FROM dlock_locks WHERE name = $1
), taken AS (` + pgTake("$4") + `
)` + pgOutcome(`NOT EXISTS (SELECT 1 FROM dlock_waiters WHERE name = $1 AND expires_at > now())`)

// pgAcquireQueued is pgAcquire for an attempt of a listening process
// (see listener): it also keeps the process's place in dlock_waiters, in
// the same statement. $4 is the pid of the process's LISTEN connection. A
// failed attempt of a subscribed waiter ($5) queues the process, or
// refreshes its place (expiry $7 µs ahead) and keeps its turn. A
// successful one takes the process out of the queue, or, when other
// waiters of the process still wait ($6), sends it to the back. The rows
// are in an unlogged table: a failed attempt stays free of WAL flushes.
// The row says that the process listens on a channel of its own
// (own_channel). A failed attempt also leaves its owner, TTL, number
// ($8) and payload ($9) in the row, for a release to grant the lock to (see
// pgRelease); a successful one clears the owner, so the process's
// other waiters are woken to try for themselves.
var pgAcquireQueued = `
WITH cur AS (
	SELECT owner, token, expires_at FROM dlock_locks WHERE name = $1
), taken AS (` + pgTake("$9") + `
), queued AS (
	INSERT INTO dlock_waiters AS w (name, pid, since, expires_at, own_channel, owner, ttl_us, attempt, payload)
	SELECT $1, $4, now(), now() + $7 * interval '1 microsecond', true,
		CASE WHEN EXISTS (SELECT 1 FROM taken) THEN NULL ELSE $2::varchar END, $3::bigint, $8::bigint,
		CASE WHEN EXISTS (SELECT 1 FROM taken) THEN NULL ELSE NULLIF($9::varchar, '') END
	WHERE CASE WHEN EXISTS (SELECT 1 FROM taken) THEN $6::boolean ELSE $5::boolean END
	ON CONFLICT (name, pid) DO UPDATE SET
		since       = CASE WHEN EXISTS (SELECT 1 FROM taken) OR w.expires_at <= now() THEN now() ELSE w.since END,
		expires_at  = EXCLUDED.expires_at,
		own_channel = true,
		owner       = EXCLUDED.owner,
		ttl_us      = EXCLUDED.ttl_us,
		attempt     = EXCLUDED.attempt,
		payload     = EXCLUDED.payload
), dequeued AS (
	DELETE FROM dlock_waiters
	WHERE name = $1 AND pid = $4 AND NOT $6::boolean AND EXISTS (SELECT 1 FROM taken)
)` + pgQueuedOutcome

// pgQueuedOutcome is pgOutcome for an attempt of a listening process: a
// hold is quiet when no other waiter of the process ($6) and no other
// process waits for the name.
var pgQueuedOutcome = pgOutcome(`NOT ($6::boolean OR EXISTS (
	SELECT 1 FROM dlock_waiters WHERE name = $1 AND pid <> $4 AND expires_at > now()))`)

// pgTake is the upsert of pgAcquire and pgAcquireQueued. An owner id is
// one hold's (re-entry happens in the process), so a row its owner holds
// is this hold's own, taken by an attempt whose reply was lost: it is
// taken again as it is, not counted twice, and a retried attempt is
// idempotent (driver.DeadlineBound). One granted to the owner by a
// release and not yet taken (reentry 0, see pgRelease) is taken as
// its one hold, with its token. Either way its expiry is pushed to this
// attempt's TTL, from which the waiter counts its lease. A hold taken
// anew stores the payload, the parameter named by payload (an empty
// string for none);
// one taken again, or granted by a release, keeps the one it has.
func pgTake(payload string) string {
	return `
	INSERT INTO dlock_locks AS l (name, owner, reentry, token, acquired_at, expires_at, payload)
	SELECT $1, $2::varchar, 1, ` + pgClock + `, now(), now() + $3 * interval '1 microsecond', NULLIF(` + payload + `::varchar, '')
	WHERE CASE WHEN EXISTS (SELECT 1 FROM cur WHERE expires_at > now() AND owner <> $2::varchar) THEN false
	           ELSE pg_try_advisory_xact_lock(` + gateClass + `, hashtext($1)) END
	ON CONFLICT (name) DO UPDATE SET
		owner       = EXCLUDED.owner,
		payload     = CASE WHEN l.expires_at > now() THEN l.payload ELSE EXCLUDED.payload END,
		reentry     = CASE WHEN l.expires_at > now() THEN GREATEST(l.reentry, 1) ELSE 1 END,
		token       = CASE WHEN l.expires_at > now() THEN l.token ELSE GREATEST(l.token + 1, ` + pgClock + `) END,
		acquired_at = CASE WHEN l.expires_at > now() THEN l.acquired_at ELSE now() END,
		expires_at  = GREATEST(l.expires_at, EXCLUDED.expires_at)
	WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner
	RETURNING token`
}

// pgOutcome is the result row of pgAcquire and pgAcquireQueued: taken,
// the token, the holder's remaining lease in µs when not taken, and a
// flag: for a hold taken, whether it is quiet (the expression quiet:
// nobody else was queued for the name); for an attempt not taken,
// whether it was busy: no other owner held the name as the statement
// saw it (no row, a free one, or the owner's own), so the gate turned it
// away, or a row inserted after the statement's snapshot did.
func pgOutcome(quiet string) string {
	return `
SELECT true, token, 0, ` + quiet + ` FROM taken
UNION ALL
SELECT false, token, GREATEST(extract(epoch FROM expires_at - now()) * 1e6, 1)::bigint,
	NOT (expires_at > now() AND owner <> $2::varchar)
FROM cur WHERE NOT EXISTS (SELECT 1 FROM taken)
UNION ALL
SELECT false, 0, 1, true WHERE NOT EXISTS (SELECT 1 FROM taken) AND NOT EXISTS (SELECT 1 FROM cur)`
}

// pgClock is the server's clock in µs. A new hold's token is the larger
// of the last token + 1 and it (a hybrid clock), so tokens keep increasing
// when the row is gone: pruned, or lost with a standby that lagged behind
// a failed primary, as long as the server's clock does not step back.
const pgClock = sqldialect.PostgresClockMicros

// pgRefresh extends a hold; the token pins it to one hold of the owner.
const pgRefresh = `
UPDATE dlock_locks SET expires_at = GREATEST(expires_at, now() + $4 * interval '1 microsecond')
WHERE name = $1 AND owner = $2 AND token = $3 AND expires_at > now()`

// pgRelease leaves one hold of $2 (token $3, or 0 for whatever token:
// the owner id is unique to one hold). The last hold passes, in the same
// UPDATE, to the owner that the queue's head process last waited with,
// with the next token (reentry 0: granted, not yet taken), for that
// waiter's TTL or, when shorter, what is left of the process's place in
// the queue (a process that stopped attempting, frozen or cut off, holds
// the lock no longer than its place would have blocked it). The head is
// notified on its own channel with
// "g/<pid>/<attempt>/<token>/<term µs>/<owner length>/<owner><name>"
// (see parseGrant). The waiter takes the lock without a statement of its
// own. The head's row goes with the grant. No grant goes to the releasing
// owner, nor to a head without an owner (a process of an earlier
// version, or one whose waiter left): it is woken instead, and tries for
// the lock. With nobody queued, every listening process is notified, for
// a waiter whose queue row the statement could not see yet. The
// statement also deletes the name's expired queue rows.
//
// The release commits without waiting for its WAL flush (or a
// synchronous standby): synchronous_commit is off for its transaction
// alone. A crash can lose a release that already returned, and then the
// lock stays with the old holder until its expiry: a delay, never a
// second holder. The next acquire's own commit flushes the WAL past the
// release anyway. So it grants only what may be lost with it: a term
// that ends no later than the hold it replaces (see pgLazy). When that
// would cut the term to less than half, it grants nothing and wakes the
// head, whose own attempt takes the lock, waiting for its flush as an
// acquire does. (A grant that waited for a synchronous standby would be
// seen by its holder as soon as the releasing client gave up the wait,
// and lost in a failover.)
var pgRelease = pgReleaseWith("", "")

// pgReleaseWith is pgRelease; with adds CTEs run first, and match narrows
// the hold released (see pgLeaveQueue).
func pgReleaseWith(with, match string) string {
	return `
WITH ` + with + `gone AS (
	DELETE FROM dlock_waiters WHERE name = $1 AND expires_at <= now() RETURNING pid
), head AS (` + pgHead(true) + `
), released AS (
	UPDATE dlock_locks l SET
		reentry     = CASE WHEN l.reentry > 1 THEN l.reentry - 1 ELSE 0 END,
		owner       = CASE WHEN l.reentry > 1 THEN l.owner ELSE g.owner END,
		payload     = CASE WHEN l.reentry > 1 THEN l.payload ELSE g.payload END,
		token       = CASE WHEN l.reentry > 1 OR g.owner IS NULL THEN l.token ELSE GREATEST(l.token + 1, ` + pgClock + `) END,
		acquired_at = CASE WHEN l.reentry > 1 OR g.owner IS NULL THEN l.acquired_at ELSE now() END,
		expires_at  = CASE WHEN l.reentry > 1 THEN l.expires_at
		                   WHEN g.owner IS NULL THEN 'epoch'
		                   ELSE now() + g.term_us * interval '1 microsecond' END
	FROM (SELECT) one LEFT JOIN (
		SELECT owner, payload, t.term_us FROM head, LATERAL (` + pgLazy("head.term_us") + `) t
		WHERE owner <> $2 AND own_channel AND head.term_us > 0 AND t.lazy
	) g ON true
	WHERE l.name = $1 AND l.owner = $2 AND (l.token = $3 OR $3::bigint = 0) AND l.expires_at > now()` + match + `
	RETURNING l.reentry, l.owner, l.token, g.term_us
), granted AS (
	DELETE FROM dlock_waiters w USING head, released r
	WHERE w.name = $1 AND w.pid = head.pid AND r.reentry = 0 AND r.owner IS NOT NULL
)
SELECT CASE
	WHEN set_config('synchronous_commit', 'off', true) IS NULL THEN NULL
	WHEN r.reentry = 0 AND r.owner IS NOT NULL THEN pg_notify('` + notifyChannel + `_' || head.pid,
		'g/' || head.pid || '/' || head.attempt || '/' || r.token || '/' || r.term_us || '/' ||
		char_length(r.owner) || '/' || r.owner || $1) IS NOT NULL
	WHEN r.reentry = 0 THEN ` + pgWake + ` IS NOT NULL
END FROM released r LEFT JOIN head ON true`
}

// pgLeaveQueue takes waiter $2 out of the queue of $1 and gives back a
// grant made to it and not taken: the process ($4, its LISTEN
// connection's pid) keeps its place for its other waiters, under no
// owner, and the lock passes on as a release passes it. $3 is the
// grant's token, or 0 for whatever the waiter was granted.
var pgLeaveQueue = pgReleaseWith(`left_queue AS (
	UPDATE dlock_waiters SET owner = NULL WHERE name = $1 AND pid = $4 AND owner = $2
), `, `
		AND l.reentry = 0`)

// pgReleaseQuiet is the release of a hold whose acquire saw nobody else
// queued (see quiet), when nobody is queued still: a few steps, where
// pgRelease's plan (the queue's head, its liveness, the grant's term)
// costs the server more than the rest of the release. When a live process is queued for the name, it changes
// nothing and says so, and the caller releases with the queue's
// statement instead. The first column says whether it released, the
// second whether anyone is queued; a hold that is not held gives false
// and false. As pgRelease, it notifies every listening process when the
// lock is free, for a waiter whose queue row it could not see yet, and
// commits without waiting for its flush.
//
// A granted hold not yet re-entered has reentry 0 (see pgRelease): its
// release, like that of reentry 1, is the last.
const pgReleaseQuiet = `
WITH waiting AS (
	SELECT EXISTS (SELECT 1 FROM dlock_waiters WHERE name = $1 AND expires_at > now()) AS queued
), released AS (` + pgLeaveUpdate + `
		AND NOT (SELECT queued FROM waiting)
	RETURNING reentry
)
SELECT r.reentry IS NOT NULL AND CASE
	WHEN set_config('synchronous_commit', 'off', true) IS NULL THEN NULL
	WHEN r.reentry = 0 THEN pg_notify('` + notifyChannel + `', '0/' || $1) IS NOT NULL
	ELSE true
END, w.queued
FROM waiting w LEFT JOIN released r ON true`

// pgLeaveUpdate is pgReleaseQuiet's update of the hold, up to its WHERE,
// which pgReleaseQuiet narrows.
const pgLeaveUpdate = `
	UPDATE dlock_locks SET
		reentry    = GREATEST(reentry - 1, 0),
		owner      = CASE WHEN reentry > 1 THEN owner END,
		payload    = CASE WHEN reentry > 1 THEN payload END,
		expires_at = CASE WHEN reentry > 1 THEN expires_at ELSE 'epoch' END
	WHERE name = $1 AND owner = $2 AND (token = $3 OR $3::bigint = 0) AND expires_at > now()`

// pgWake notifies the process head (pgHead, joined with LEFT JOIN), on
// its own channel when it has one (an earlier version's process may
// not), or, when head is NULL, every listening process.
const pgWake = `pg_notify(
		CASE WHEN head.own_channel THEN '` + notifyChannel + `_' || head.pid ELSE '` + notifyChannel + `' END,
		coalesce(head.pid, 0) || '/' || $1)`

// pgHead is the longest waiting process queued for $1 whose LISTEN
// connection is alive (pid and own_channel), or no row for none (and then
// every listening process is notified). Its statement's CTE gone
// returns the pids whose rows it deletes: the statement's snapshot still
// shows them. A process that crashed or lost its connection leaves its
// row behind until it expires; pg_stat_get_activity tells that its pid is
// gone, so a release never wakes nobody.
//
// The queue is sorted first and the liveness test runs on it in order,
// stopping at the first live process (OFFSET 0 keeps the test out of the
// sorted subquery): each pg_stat_get_activity call scans every backend,
// and testing every queued process would put one such scan per waiting
// process on each release. With grants, the row also gives the waiter to
// grant the lock to: owner, ttl_us and attempt.
func pgHead(grants bool) string {
	cols := ", own_channel"
	if grants {
		// term_us: the grant's term, the waiter's TTL or, when
		// shorter, what is left of the process's place in the queue.
		cols += `, owner, payload, attempt,
				LEAST(ttl_us, ceil(extract(epoch FROM expires_at - now()) * 1e6)::bigint) AS term_us`
	}
	return `
		SELECT * FROM (
			SELECT pid` + cols + ` FROM dlock_waiters
			WHERE name = $1 AND expires_at > now() AND pid NOT IN (SELECT pid FROM gone)
			ORDER BY since, pid OFFSET 0
		) queue
		WHERE EXISTS (SELECT 1 FROM pg_stat_get_activity(queue.pid))
		LIMIT 1`
}

// pgPassOn takes process $2 out of the queue of $1 and notifies the next:
// $2 was notified for a release after its last waiter for $1 left.
var pgPassOn = `
WITH gone AS (
	DELETE FROM dlock_waiters WHERE name = $1 AND pid = $2 RETURNING pid
)
SELECT ` + pgWake + ` FROM (SELECT) one LEFT JOIN (` + pgHead(false) + `) head ON true`

// pgTransfer hands a hold, the only one of its owner, to owner $4 (with
// payload $7) for $5 µs with the next token, as a grant: one that ends no later than the
// hold it replaces commits without waiting for its WAL flush, any other
// waits for it as an acquire does (see pgLazy; the Client gives back an
// outcome it did not learn, so a wait it gave up on grants nothing to
// the goroutine). It returns the token and
// the term granted. No row when the hold is gone or re-entered, or when
// a process other than $6 (this one's LISTEN connection, 0 for none)
// waits for the name in dlock_waiters: that hold is then released, and
// the release notifies the waiting process.
var pgTransfer = `
WITH handed AS (
	UPDATE dlock_locks l SET
		owner       = $4,
		payload     = NULLIF($7::varchar, ''),
		token       = GREATEST(l.token + 1, ` + pgClock + `),
		acquired_at = now(),
		expires_at  = now() + t.term_us * interval '1 microsecond'
	FROM (` + pgLazy("$5::bigint") + `) t
	WHERE l.name = $1 AND l.owner = $2 AND l.token = $3 AND l.reentry <= 1 AND l.expires_at > now()
		AND NOT EXISTS (SELECT 1 FROM dlock_waiters WHERE name = $1 AND pid <> $6 AND expires_at > now())
	RETURNING l.token, t.term_us, t.lazy
)
SELECT token, CASE
	WHEN CASE WHEN lazy THEN set_config('synchronous_commit', 'off', true) IS NULL END THEN NULL
	ELSE term_us
END FROM handed`

// pgLazy is the term of a grant that replaces the hold of $1 and $2
// (release or hand-off), for the term_us (an expression) the grantee
// asked for, and whether the grant may commit without waiting for its
// WAL flush (lazy): one row, or none when the hold is not visible.
//
// A grant lost with its commit (a crash, or a failover to a standby that
// had not received it) leaves the last commit that was flushed, and the
// hold of that commit, in place until its expiry. So a grant ending no
// later than the hold it replaces may be lost: its holder's lease ends
// before that hold's expiry, while the lock is still held on the server
// (the hold replaced was itself flushed, or a lazy grant ending no later
// than the one it replaced, and so on back to one that was). The term is
// therefore cut to what is left of that hold when that leaves at least
// half of it; otherwise the grant is not lazy (see pgRelease and
// pgTransfer for what each does then). The expiry is read from the
// statement's snapshot: a renewal racing with the release only moves the
// real one later.
func pgLazy(termUS string) string {
	return `
		SELECT CASE WHEN lazy THEN LEAST(want, left_us) ELSE want END AS term_us, lazy
		FROM (SELECT want, left_us, left_us * 2 >= want AS lazy FROM (
			SELECT ` + termUS + ` AS want,
				floor(extract(epoch FROM expires_at - now()) * 1e6)::bigint AS left_us
			FROM dlock_locks WHERE name = $1 AND owner = $2
		) w) d`
}

const pgInspect = `
SELECT owner, token, (extract(epoch FROM expires_at - now()) * 1e6)::bigint, coalesce(payload, ''),
	coalesce((extract(epoch FROM now() - acquired_at) * 1e6)::bigint, 0)
FROM dlock_locks WHERE name = $1 AND owner IS NOT NULL AND expires_at > now()`

// gateClass is the first key of the acquire gate's advisory lock, so it
// shares no key with the application's own two-key advisory locks unless
// they pick the same number.
const gateClass = "1684827499" // "dloc" as a big-endian int32

type postgres struct {
	db       *sql.DB
	listener *listener
	// queueTTL is how long a process's place in dlock_waiters outlasts
	// its last attempt: longer than the pause between a waiter's attempts
	// (Config.PushFallback at most).
	queueTTL time.Duration
	log      *slog.Logger
}

// registration is how an attempt keeps its process's place in the queue;
// the zero value when nothing of this process listens.
func (p *postgres) registration(r driver.Request) registration {
	if p.listener == nil {
		return registration{}
	}
	return p.listener.registration(r.Name, r.Owner, r.Wait)
}

var (
	_ driver.Backend      = (*postgres)(nil)
	_ driver.Notifier     = (*postgres)(nil)
	_ driver.LiveNotifier = (*postgres)(nil)
	_ driver.Transferer   = (*postgres)(nil)
	_ driver.Leaver       = (*postgres)(nil)
	_ dlock.Inspector     = (*postgres)(nil)
)

func (p *postgres) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if p.listener != nil && r.Wait {
		if g, ok := p.listener.take(r.Name, r.Owner); ok {
			return g, nil // a release granted it to this waiter and said so
		}
	}
	var a pgAnswer
	for try := 0; ; try++ {
		var err error
		if a, err = p.attempt(ctx, r); err != nil {
			return driver.Grant{}, err
		}
		// A busy miss (see pgOutcome) lasts one statement of another
		// attempt: asked again, the server has decided that one.
		if a.acquired || !a.flag || try == busyRetries || ctx.Err() != nil {
			break
		}
	}
	g := driver.Grant{Acquired: a.acquired, Token: uint64(a.token)}
	if !a.acquired {
		g.RetryAfter = timeunit.Of(max(a.leftUS, 0), time.Microsecond)
		g.Busy = a.flag
	}
	if a.acquired && a.flag {
		g.Handle = quiet{}
	}
	return g, nil
}

// busyRetries is how many times an attempt turned away busy is made
// again at once before it is reported busy.
const busyRetries = 2

// pgAnswer is an acquire statement's answer; flag is pgOutcome's: quiet
// when acquired, busy when not.
type pgAnswer struct {
	acquired, flag bool
	token, leftUS  int64
}

// attempt runs the acquire statement: the one that queues this process's
// waiter where the listener is registered, the plain one otherwise.
func (p *postgres) attempt(ctx context.Context, r driver.Request) (a pgAnswer, err error) {
	scan := func(stmt string, args ...any) error {
		return p.db.QueryRowContext(ctx, stmt, args...).Scan(&a.acquired, &a.token, &a.leftUS, &a.flag)
	}
	reg := p.registration(r)
	if reg.pid == 0 {
		return a, scan(pgAcquire, r.Name, r.Owner, micros(r.TTL), r.Payload)
	}
	err = scan(pgAcquireQueued, r.Name, r.Owner, micros(r.TTL), int64(reg.pid), reg.self && r.Wait, reg.others,
		micros(p.queueTTL), int64(reg.attempt), r.Payload)
	if err == nil && !a.acquired && reg.attempt != 0 {
		p.listener.missed(r.Name, r.Owner, reg.attempt)
	}
	return a, err
}

// quiet is the Handle of a hold whose acquire saw no other waiter queued
// for its name: its release tries pgReleaseQuiet first.
type quiet struct{}

func (p *postgres) Refresh(ctx context.Context, h driver.Hold) error {
	res, err := p.db.ExecContext(ctx, pgRefresh, h.Name, h.Owner, int64(h.Token), micros(h.TTL))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return notHeld(h)
	}
	return nil
}

func (p *postgres) Release(ctx context.Context, h driver.Hold) error {
	if _, ok := h.Handle.(quiet); ok {
		var released, waiting bool
		err := p.db.QueryRowContext(ctx, pgReleaseQuiet, h.Name, h.Owner, int64(h.Token)).Scan(&released, &waiting)
		switch {
		case err != nil:
			return err
		case released:
			return nil
		case !waiting:
			return notHeld(h)
		}
	}
	var notified sql.NullBool
	err := p.db.QueryRowContext(ctx, pgRelease, h.Name, h.Owner, int64(h.Token)).Scan(&notified)
	if errors.Is(err, sql.ErrNoRows) {
		return notHeld(h)
	}
	return err
}

// Leave takes r's waiter out of its process's place in the queue and
// gives back a grant a release made to it that it did not take.
func (p *postgres) Leave(ctx context.Context, r driver.Request) error {
	if p.listener == nil {
		return nil
	}
	return giveBack(ctx, p.db, r.Name, r.Owner, 0, p.listener.pid())
}

// giveBack runs pgLeaveQueue: it gives back a grant to owner with token
// (0: whatever token) that owner did not take, and takes owner out of
// process pid's place in the queue of name.
func giveBack(ctx context.Context, db *sql.DB, name, owner string, token uint64, pid uint32) error {
	_, err := db.ExecContext(ctx, pgLeaveQueue, name, owner, int64(token), int64(pid))
	return err
}

func (p *postgres) Transfer(ctx context.Context, h driver.Hold, r driver.Request) (driver.Grant, error) {
	var token, termUS int64
	err := p.db.QueryRowContext(ctx, pgTransfer, h.Name, h.Owner, int64(h.Token), r.Owner, micros(r.TTL),
		int64(p.registration(r).pid), r.Payload).Scan(&token, &termUS)
	if errors.Is(err, sql.ErrNoRows) {
		return driver.Grant{}, nil
	}
	if err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Acquired: true, Token: uint64(token), Term: timeunit.Of(termUS, time.Microsecond)}, nil
}

func (p *postgres) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	var (
		h             dlock.Holder
		token         int64
		leftUS, ageUS int64
	)
	err := p.db.QueryRowContext(ctx, pgInspect, name).Scan(&h.Owner, &token, &leftUS, &h.Payload, &ageUS)
	if errors.Is(err, sql.ErrNoRows) {
		return dlock.Holder{}, false, nil
	}
	if err != nil {
		return dlock.Holder{}, false, err
	}
	h.Token, h.TTL, h.Age = uint64(token), timeunit.Of(leftUS, time.Microsecond), timeunit.Of(ageUS, time.Microsecond)
	return h, true, nil
}

func (p *postgres) Subscribe(ctx context.Context, r driver.Request) (<-chan struct{}, func(), error) {
	if p.listener == nil {
		return nil, nil, fmt.Errorf("tablelock: the Locker is closed: %w", errors.ErrUnsupported)
	}
	if p.db.Stats().MaxOpenConnections == 1 {
		// The listener would hold the pool's only connection, and the
		// holder could not renew: wait by polling.
		return nil, nil, fmt.Errorf("tablelock: no room in a pool of one connection for LISTEN: %w", errors.ErrUnsupported)
	}
	return p.listener.subscribe(ctx, r.Name, r.Owner)
}

// SubscribeLive is Subscribe while the process's LISTEN connection is up:
// then a waiter's first attempt already queues the process, and a miss
// waits for its grant with no second attempt.
func (p *postgres) SubscribeLive(r driver.Request) (<-chan struct{}, func(), bool) {
	if p.listener == nil || p.db.Stats().MaxOpenConnections == 1 {
		return nil, nil, false
	}
	return p.listener.subscribeLive(r.Name, r.Owner)
}
