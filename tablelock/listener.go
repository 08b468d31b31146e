package tablelock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/wakeup"
)

// listenerIdle is how long a listener connection stays open with no waiter,
// so bursts of contention do not pay for a new LISTEN each time.
const listenerIdle = 30 * time.Second

// listener is one LISTEN connection per *sql.DB, shared by the waiters of
// every Locker on it: a waiting process, as the server sees it. It runs
// while anyone waits (and listenerIdle after).
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

	mu      sync.Mutex     // guards what follows, and adding to hub
	gen     *listenGen     // the running connection, nil when stopped
	owners  map[string]int // subscribed waiters, by ownerKey
	idle    *time.Timer
	closed  bool
	stopped chan struct{}  // closed when the run goroutine exits
	passing sync.WaitGroup // notifications being passed on
}

// listenGen is one listener connection. ready is closed once LISTEN is in
// effect (pid set), or once it failed (err set).
type listenGen struct {
	ready  chan struct{}
	err    error
	pid    uint32 // the connection's backend pid
	cancel context.CancelFunc
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
}

func ownerKey(name, owner string) string { return name + "\x00" + owner }

// listeners are the listeners in use, one per *sql.DB.
var listeners wakeup.Shared[*sql.DB, *listener]

// listenerFor returns db's shared listener; release it with unref.
func listenerFor(db *sql.DB, log *slog.Logger) *listener {
	return listeners.Get(db, func() *listener { return &listener{db: db, log: log} })
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
	ch, removeWaiter := l.hub.Add(name)
	if l.owners == nil {
		l.owners = map[string]int{}
	}
	key := ownerKey(name, owner)
	l.owners[key]++
	remove := func() {
		removeWaiter()
		if l.owners[key]--; l.owners[key] == 0 {
			delete(l.owners, key)
		}
	}
	if l.idle != nil {
		l.idle.Stop()
		l.idle = nil
	}
	if l.gen == nil {
		l.start()
	}
	gen := l.gen
	l.mu.Unlock()

	var once sync.Once
	cancel := func() { once.Do(func() { l.unsubscribe(remove) }) }
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
	return ch, cancel, nil
}

// registration tells an acquire attempt for name by owner how to keep its
// process's place in the server's queue.
func (l *listener) registration(name, owner string) registration {
	l.mu.Lock()
	defer l.mu.Unlock()
	gen := l.gen
	if gen == nil || !isClosedReady(gen.ready) || gen.err != nil {
		return registration{}
	}
	self := l.owners[ownerKey(name, owner)] > 0
	return registration{pid: gen.pid, self: self, others: l.hub.Waiting(name) > int(boolInt(self))}
}

// unsubscribe removes a waiter; with none left, the connection closes
// after listenerIdle.
func (l *listener) unsubscribe(remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	remove()
	if l.hub.Len() == 0 && l.gen != nil {
		gen := l.gen
		l.idle = time.AfterFunc(listenerIdle, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.hub.Len() == 0 && l.gen == gen {
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
		cancel()
		l.mu.Lock()
		defer l.mu.Unlock()
		if gen.err == nil && !isClosedReady(gen.ready) {
			gen.err = err
			close(gen.ready)
		}
		if l.gen == gen {
			l.gen = nil
		}
		// Notifications may have been missed while the connection died:
		// wake every waiter to look again; those still waiting resubscribe
		// through their own fallback poll.
		l.hub.WakeAll()
		if ctx.Err() == nil {
			l.log.Warn("tablelock: listener connection ended; reconnecting", "err", err)
			time.AfterFunc(time.Second, l.restart)
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
// ends or the connection fails. The connection is always discarded after,
// never returned to the pool with LISTEN in effect.
func (l *listener) run(ctx context.Context, gen *listenGen) error {
	conn, err := l.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // the session ends with the listener; run's error says why
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
		gen.pid = pid
		close(gen.ready)
		// Releases between a lost connection and this LISTEN were missed.
		l.hub.WakeAll()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				return errjoin.Join(err, sqldriver.ErrBadConn)
			}
			l.deliver(ctx, gen.pid, n.Payload)
		}
	})
	return err
}

// deliver hands a release's notification (see parsePayload) to one
// waiter of the name, when it is for every process or for this one. One
// for this process when none of its waiters waits for the name any more
// is passed on to the next process in the queue.
func (l *listener) deliver(ctx context.Context, pid uint32, payload string) {
	to, name := parsePayload(payload)
	switch {
	case to == 0:
		l.hub.WakeOne(name)
	case to != pid:
	case l.hub.Waiting(name) > 0:
		l.hub.WakeOne(name)
	default:
		l.passing.Add(1)
		go func() {
			defer l.passing.Done()
			ctx, cancel := context.WithTimeout(ctx, passOnTimeout)
			defer cancel()
			_, err := l.db.ExecContext(ctx, pgOwnChannel.passOn, name, int64(pid))
			if missingOwnChannel(err) { // migration 000004 not applied; nothing changed
				_, err = l.db.ExecContext(ctx, pgSharedChannel.passOn, name, int64(pid))
			}
			if err != nil && ctx.Err() == nil {
				l.log.Warn("tablelock: passing a wake-up on", "name", name, "err", err)
			}
		}()
	}
}

// passOnTimeout bounds the statement that passes a wake-up on: the next
// waiter's fallback poll covers one that fails.
const passOnTimeout = 5 * time.Second

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
