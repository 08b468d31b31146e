package tablelock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/timeunit"
	"github.com/dlockhq/dlock/internal/wakeup"
)

// listenerLinger is how long a listener keeps listening with no waiter
// beyond its process's longest place in the queue (queueTTL): until every
// queue row of the process has expired, a release may still pick the
// process as the head and notify it, and the listener must pass that on.
// After it, the listener stops listening and gives its connection back to
// the pool. On PostgreSQL before 19, every NOTIFY in the database signals
// every listening backend, whatever its channels, so an idle process that
// kept listening would slow every release (dlock's, and the application's
// own NOTIFY) for as long as it did.
const listenerLinger = time.Second

// listener is one LISTEN connection per *sql.DB, shared by the waiters of
// every Locker on it: a waiting process, as the server sees it. It runs
// while anyone waits, and for as long after as its place in the queue may
// last (see listenerLinger).
//
// Waiting processes queue on the server (table dlock_waiters, by the pid
// of their LISTEN connection): a release notifies the longest waiting live
// process alone, on the process's own channel, or every process, on the
// shared one, when none is queued. The process hands
// the notification to its longest waiting waiter of that name
// (wakeup.Hub.WakeOne). A release frees the lock for one, so a hand-off
// costs a few statements however many processes and waiters there are.
// A notification for a process that no longer waits for the name is passed
// on to the next in the queue.
type listener struct {
	db  *sql.DB
	log *slog.Logger

	hub wakeup.Hub

	mu     sync.Mutex            // guards what follows, and adding to hub
	linger time.Duration         // how long to listen with no waiter, see listenerLinger
	gen    *listenGen            // the running connection, nil when stopped
	waits  map[string]*ownerWait // subscribed waiters, by ownerKey
	idle   *time.Timer
	closed bool
	// pooled is set once a connection was found to reach PostgreSQL
	// through a pooler: LISTEN is not delivered reliably there (transaction
	// pooling hands the server session to other clients), and the queue's
	// pids must be the server's. Waiters poll instead.
	pooled  error
	stopped chan struct{}  // closed when the run goroutine exits
	passing sync.WaitGroup // notifications being passed on, grants given back
}

// ownerWait is the subscribed waiters of one owner (one, but for a
// subscription that overlaps the next) and its side of a grant that a
// release makes on its behalf (see pgRelease): when its attempts
// were sent, and the grant once the release notified it. The grant names
// the owner's attempt whose queue row it was made from, and the lease
// counts from that attempt's send time, which precedes the grant.
type ownerWait struct {
	subs    int
	wake    <-chan struct{}      // the latest subscription's
	sent    map[uint64]time.Time // attempts a grant may still name
	granted driver.Grant
}

// attempts numbers the waiting attempts of the process: a grant names
// one, and a grant notified late, for an earlier wait of the same owner,
// names none of a later one.
var attempts atomic.Uint64

// errPooler is why a listener does not listen through a pooler.
var errPooler = errors.New("tablelock: LISTEN is not delivered through a connection pooler")

// listenGen is one listener connection. ready is closed once LISTEN is in
// effect (pid set), or once it failed (err set).
type listenGen struct {
	ready  chan struct{}
	err    error
	pid    uint32 // the connection's backend pid
	cancel context.CancelFunc
	// idle is set when the listener stops for want of waiters: its
	// connection then goes back to the pool (see unlisten).
	idle atomic.Bool
}

// registration is how an acquire attempt keeps its process's place in the
// server's queue of waiters for its name.
type registration struct {
	// pid is the process's LISTEN connection; 0 when it is not listening,
	// and the attempt leaves the queue alone.
	pid uint32
	// self: the attempt's waiter is subscribed, so a failed attempt
	// queues the process (or refreshes its place).
	self bool
	// others: other waiters of the process wait for the name, so a
	// successful attempt sends the process to the back of the queue
	// rather than out of it.
	others bool
	// attempt numbers a waiting attempt of a subscribed waiter, for a
	// grant to name (see ownerWait); 0 for any other attempt.
	attempt uint64
}

func ownerKey(name, owner string) string { return name + "\x00" + owner }

// listeners are the listeners in use, one per *sql.DB.
var listeners wakeup.Shared[*sql.DB, *listener]

// listenerFor returns db's shared listener for a Locker whose waiters
// keep their place in the queue for queueTTL; release it with unref.
func listenerFor(db *sql.DB, log *slog.Logger, queueTTL time.Duration) *listener {
	l := listeners.Get(db, func() *listener { return &listener{db: db, log: log} })
	l.mu.Lock()
	l.linger = max(l.linger, queueTTL+listenerLinger)
	l.mu.Unlock()
	return l
}

// unref drops a Locker's use of l; the last one closes it.
func (l *listener) unref() {
	if listeners.Release(l.db) {
		l.close()
	}
}

// subscribe registers a waiter for name and returns once LISTEN is in
// effect, so no release after it is missed.
func (l *listener) subscribe(ctx context.Context, name, owner string) (<-chan struct{}, func(), error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, errors.New("tablelock: listener closed")
	}
	if l.pooled != nil {
		l.mu.Unlock()
		return nil, nil, l.pooled
	}
	ch, cancel := l.add(name, owner)
	if l.gen == nil {
		l.start()
	}
	gen := l.gen
	l.mu.Unlock()

	select {
	case <-gen.ready:
	case <-ctx.Done():
		cancel()
		return nil, nil, ctx.Err()
	}
	if gen.err != nil {
		cancel()
		return nil, nil, gen.err
	}
	// The caller tries again before it waits on ch: a wake-up that came
	// before now (run's, for the waiters of an earlier connection, or a
	// release's since LISTEN) is one that attempt answers.
	select {
	case <-ch:
	default:
	}
	return ch, cancel, nil
}

// subscribeLive is subscribe when LISTEN is already in effect (another
// waiter of the process uses the connection, or one did lately, see
// linger); otherwise it registers nothing and returns ok false.
func (l *listener) subscribeLive(name, owner string) (<-chan struct{}, func(), bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.gen == nil || !isClosedReady(l.gen.ready) || l.gen.err != nil {
		return nil, nil, false
	}
	ch, cancel := l.add(name, owner)
	return ch, cancel, true
}

// add registers a waiter for name by owner and keeps the connection from
// closing while it waits. l.mu must be held.
func (l *listener) add(name, owner string) (<-chan struct{}, func()) {
	ch, removeWaiter := l.hub.Add(name)
	if l.waits == nil {
		l.waits = map[string]*ownerWait{}
	}
	key := ownerKey(name, owner)
	w := l.waits[key]
	if w == nil {
		w = &ownerWait{sent: map[uint64]time.Time{}}
		l.waits[key] = w
	}
	w.subs++
	w.wake = ch
	remove := func() {
		removeWaiter()
		if w.subs--; w.subs == 0 {
			delete(l.waits, key)
			if w.granted.Acquired {
				// Granted after the waiter's last attempt, and not
				// taken: the waiter gave up (or took the grant by an
				// attempt of its own, and then nothing is given back).
				l.giveBack(context.Background(), name, owner, w.granted.Token)
			}
		}
	}
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	var once sync.Once
	return ch, func() { once.Do(func() { l.unsubscribe(remove) }) }
}

// registration tells an acquire attempt for name by owner how to keep its
// process's place in the server's queue, and numbers a waiting attempt
// (wait) of a subscribed waiter.
func (l *listener) registration(name, owner string, wait bool) registration {
	l.mu.Lock()
	defer l.mu.Unlock()
	gen := l.gen
	if gen == nil || !isClosedReady(gen.ready) || gen.err != nil {
		return registration{}
	}
	w := l.waits[ownerKey(name, owner)]
	reg := registration{pid: gen.pid, self: w != nil, others: l.hub.Waiting(name) > int(boolInt(w != nil))}
	if w != nil && wait {
		reg.attempt = attempts.Add(1)
		w.sent[reg.attempt] = time.Now()
	}
	return reg
}

// pid is the backend pid of the running LISTEN connection, 0 for none.
func (l *listener) pid() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen == nil || !isClosedReady(l.gen.ready) {
		return 0
	}
	return l.gen.pid
}

// missed records that attempt n of owner's waiter found the lock held,
// and forgets the earlier attempts: a grant made before attempt n ran
// was taken by it, and one made while it ran, from the queue row of an
// earlier attempt, is only a wake-up (see deliverGrant) and is taken by
// the next attempt.
func (l *listener) missed(name, owner string, n uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.waits[ownerKey(name, owner)]; w != nil {
		for k := range w.sent {
			if k < n {
				delete(w.sent, k)
			}
		}
	}
}

// take returns the grant a release made to owner's waiter for name and
// notified, if any, and forgets it.
func (l *listener) take(name, owner string) (driver.Grant, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.waits[ownerKey(name, owner)]
	if w == nil || !w.granted.Acquired {
		return driver.Grant{}, false
	}
	g := w.granted
	w.granted = driver.Grant{}
	return g, true
}

// unsubscribe removes a waiter; with none left, the listener stops
// after linger.
func (l *listener) unsubscribe(remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	remove()
	if l.hub.Len() == 0 && l.gen != nil {
		gen := l.gen
		l.idle = time.AfterFunc(l.linger, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.hub.Len() == 0 && l.gen == gen {
				gen.idle.Store(true)
				gen.cancel()
			}
		})
	}
}

// start starts a listener connection. l.mu must be held.
func (l *listener) start() {
	ctx, cancel := context.WithCancel(context.Background())
	gen := &listenGen{ready: make(chan struct{}), cancel: cancel}
	l.gen = gen
	stopped := make(chan struct{})
	l.stopped = stopped
	go func() {
		defer close(stopped)
		err := l.run(ctx, gen)
		asked := ctx.Err() != nil // stopped for want of waiters, or closed; else the connection failed
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		if gen.err == nil && !isClosedReady(gen.ready) {
			gen.err = err
			close(gen.ready)
		}
		if errors.Is(err, errPooler) {
			l.pooled = err
			l.gen = nil
			return
		}
		if l.gen == gen {
			l.gen = nil
		}
		// Notifications may have been missed while the connection was
		// going: wake every waiter to look again. A waiter keeps its
		// subscription, so the listener must come back for those still
		// waiting.
		l.hub.WakeAll()
		switch {
		case l.closed:
		case !asked:
			l.log.Warn("tablelock: listener connection ended; reconnecting", "err", err)
			time.AfterFunc(time.Second, l.restart)
		case l.hub.Len() > 0:
			// Stopped for want of waiters, and one came meanwhile.
			l.start()
		}
	}()
}

// restart starts a new listener connection if waiters remain.
func (l *listener) restart() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen == nil && l.hub.Len() > 0 && !l.closed {
		l.start()
	}
}

func isClosedReady(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// run holds one connection: LISTEN, then deliver notifications until ctx
// ends or the connection fails. The connection of a listener that stops
// for want of waiters goes back to the pool once UNLISTEN has taken
// effect; any other is discarded (at once when the Locker closes, whatever
// the server does), never returned with LISTEN in effect.
func (l *listener) run(ctx context.Context, gen *listenGen) error {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()                   // back to the pool, unless Raw said driver.ErrBadConn
	pooled, detail, known := sqldialect.KnownPooler(l.db) // found at the Locker's first use
	if !known {
		var err error
		if pooled, detail, _, err = sqldialect.Pooler(ctx, conn); err != nil {
			return err
		}
	}
	if pooled {
		return fmt.Errorf("%w (%s): waiters poll: %w", errPooler, detail, errors.ErrUnsupported)
	}
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("tablelock: LISTEN needs pgx's stdlib driver, not %T; waiters poll: %w", dc, errors.ErrUnsupported)
		}
		pc := sc.Conn()
		// The shared channel carries wake-ups for every process and those
		// of releases by versions before own_channel; the own one, those
		// for this process alone (see pgWake).
		pid := pc.PgConn().PID()
		if _, err := pc.Exec(ctx, fmt.Sprintf("LISTEN %s; LISTEN %s_%d", notifyChannel, notifyChannel, pid)); err != nil {
			return err
		}
		// Releases between a lost connection and this LISTEN were missed:
		// every waiter looks again. One that subscribed to this
		// connection makes its attempt after ready anyway, and drops
		// this wake-up (subscribe); so that it finds it there, ready
		// closes after it, and under l.mu, which an attempt's
		// registration takes.
		l.mu.Lock()
		gen.pid = pid
		l.hub.WakeAll()
		close(gen.ready)
		l.mu.Unlock()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil && gen.idle.Load() {
				return unlisten(pc.PgConn())
			}
			if err != nil {
				// Closed here, not only marked bad: a connection of a
				// pgx pool (stdlib.OpenDBFromPool) would otherwise go
				// back to the pool still listening, and its live pid
				// would keep the process at the head of queues.
				cctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				return errjoin.Join(err, pc.Close(cctx), sqldriver.ErrBadConn)
			}
			l.deliver(ctx, gen.pid, n.Payload)
		}
	})
	return err
}

// unlistenTimeout bounds the UNLISTEN of a listener that stops; a
// connection that does not answer in time is discarded.
const unlistenTimeout = 5 * time.Second

// unlisten ends LISTEN on the connection of a listener that stops for
// want of waiters, so that it can go back to the pool. Any error (and the
// connection with it) is driver.ErrBadConn: a connection that may still
// listen is never reused. A notification that arrives before UNLISTEN
// takes effect is dropped: the listener stops only when nothing of its
// process waits and its queue rows have expired (see listenerLinger).
func unlisten(pc *pgconn.PgConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), unlistenTimeout)
	defer cancel()
	if _, err := pc.Exec(ctx, "UNLISTEN *").ReadAll(); err != nil {
		return errjoin.Join(err, pc.Close(ctx), sqldriver.ErrBadConn)
	}
	return nil
}

// deliver hands a release's notification (see parsePayload) to one
// waiter of the name, when it is for every process or for this one. One
// for this process when none of its waiters waits for the name any more
// is passed on to the next process in the queue. A grant (see parseGrant)
// goes to its owner's waiter.
func (l *listener) deliver(ctx context.Context, pid uint32, payload string) {
	if g, ok := parseGrant(payload); ok {
		if g.pid == pid {
			l.deliverGrant(ctx, g)
		}
		return
	}
	to, name := parsePayload(payload)
	switch {
	case to == 0:
		l.hub.WakeOne(name)
	case to != pid:
	case l.hub.Waiting(name) > 0:
		l.hub.WakeOne(name)
	default:
		l.background(ctx, func(ctx context.Context) {
			_, err := l.db.ExecContext(ctx, pgPassOn, name, int64(pid))
			if err != nil && ctx.Err() == nil {
				l.log.Warn("tablelock: passing a wake-up on", "name", name, "err", err)
			}
		})
	}
}

// deliverGrant hands a grant to its owner's waiter and wakes it. A grant
// that names an attempt the waiter no longer knows only wakes it: its
// next attempt takes the lock, as its own hold, and counts the lease from
// its own send. A grant for an owner that no longer waits here is given
// back. The process's other waiters of the name, if any, lost its place
// in the queue with the grant: one of them is woken to take it again.
func (l *listener) deliverGrant(ctx context.Context, g grantNote) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.waits[ownerKey(g.name, g.owner)]
	if w == nil {
		l.giveBack(ctx, g.name, g.owner, g.token)
		return
	}
	if sent, ok := w.sent[g.attempt]; ok {
		w.granted = driver.Grant{Acquired: true, Token: g.token, Since: sent, Term: g.term}
	}
	l.hub.WakeWaiter(g.name, w.wake)
	if l.hub.Waiting(g.name) > w.subs {
		// The grant took the process out of the queue, and other
		// waiters of it still wait: one tries, and queues it again.
		l.hub.WakeOne(g.name)
	}
}

// giveBack gives back, in the background, a grant owner did not take (see
// pgLeaveQueue); it is a no-op for one that owner took by an attempt of
// its own. l.mu must be held.
func (l *listener) giveBack(ctx context.Context, name, owner string, token uint64) {
	pid := uint32(0)
	if l.gen != nil {
		pid = l.gen.pid
	}
	l.background(ctx, func(ctx context.Context) {
		if err := giveBack(ctx, l.db, name, owner, token, pid); err != nil && ctx.Err() == nil {
			l.log.Warn("tablelock: giving back a grant its waiter did not take; it expires", "name", name, "err", err)
		}
	})
}

// background runs a statement of the listener's own on a goroutine that
// close waits for, within passOnTimeout of ctx (the listener connection's,
// which close cancels, when there is one).
func (l *listener) background(ctx context.Context, f func(ctx context.Context)) {
	l.passing.Add(1)
	go func() {
		defer l.passing.Done()
		ctx, cancel := context.WithTimeout(ctx, passOnTimeout)
		defer cancel()
		f(ctx)
	}()
}

// passOnTimeout bounds the statement that passes a wake-up on: the next
// waiter's fallback poll covers one that fails.
const passOnTimeout = 5 * time.Second

// grantNote is a grant's notification: "g/<pid>/<attempt>/<token>/<term
// µs>/<owner length in characters>/<owner><name>" (see pgRelease).
type grantNote struct {
	pid            uint32
	attempt, token uint64
	term           time.Duration
	owner, name    string
}

// parseGrant parses a grant's notification; ok is false for any other
// payload.
func parseGrant(payload string) (g grantNote, ok bool) {
	rest, ok := strings.CutPrefix(payload, "g/")
	if !ok {
		return g, false
	}
	var fields [5]uint64
	for i := range fields {
		var field string
		var err error
		if field, rest, ok = strings.Cut(rest, "/"); !ok {
			return g, false
		}
		if fields[i], err = strconv.ParseUint(field, 10, 64); err != nil {
			return g, false
		}
	}
	n := int(fields[4])
	if fields[0] > math.MaxUint32 || fields[3] > math.MaxInt64/1000 || utf8.RuneCountInString(rest) < n {
		return g, false
	}
	i := 0
	for range n {
		_, size := utf8.DecodeRuneInString(rest[i:])
		i += size
	}
	return grantNote{
		pid: uint32(fields[0]), attempt: fields[1], token: fields[2],
		term:  timeunit.Of(int64(min(fields[3], math.MaxInt64)), time.Microsecond),
		owner: rest[:i], name: rest[i:],
	}, true
}

// parsePayload splits a release notification "<pid>/<name>" into the
// backend pid of the LISTEN connection it is for (0: every process) and
// the lock name. A payload without a pid (a release by an older version
// of this package) is a name, for every process.
func parsePayload(payload string) (pid uint32, name string) {
	i := strings.IndexByte(payload, '/')
	if i <= 0 {
		return 0, payload
	}
	n, err := strconv.ParseUint(payload[:i], 10, 32)
	if err != nil {
		return 0, payload
	}
	return uint32(n), payload[i+1:]
}

func (l *listener) close() {
	l.mu.Lock()
	l.closed = true
	if l.idle != nil {
		l.idle.Stop()
	}
	gen, stopped := l.gen, l.stopped
	l.mu.Unlock()
	if gen != nil {
		gen.cancel()
		<-stopped
	}
	l.passing.Wait()
}
