package tablelock

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
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
// every Locker on it. It runs while anyone waits (and listenerIdle after),
// and hands each release notification to one waiter of that name, the
// longest waiting (wakeup.Hub.WakeOne): a release frees the lock for one,
// so a process's waiters cost one attempt per hand-off, not one each.
type listener struct {
	db  *sql.DB
	log *slog.Logger

	hub wakeup.Hub

	mu      sync.Mutex // guards what follows, and adding to hub
	gen     *listenGen // the running connection, nil when stopped
	idle    *time.Timer
	closed  bool
	stopped chan struct{} // closed when the run goroutine exits
}

// listenGen is one listener connection. ready is closed once LISTEN is in
// effect, or once it failed (err set).
type listenGen struct {
	ready  chan struct{}
	err    error
	cancel context.CancelFunc
}

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
func (l *listener) subscribe(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, errors.New("tablelock: listener closed")
	}
	ch, remove := l.hub.Add(name)
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

// unsubscribe removes a waiter; with none left, the connection closes
// after listenerIdle.
func (l *listener) unsubscribe(remove func() bool) {
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
		if _, err := pc.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
			return err
		}
		close(gen.ready)
		// Releases between a lost connection and this LISTEN were missed.
		l.hub.WakeAll()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				return errjoin.Join(err, sqldriver.ErrBadConn)
			}
			l.hub.WakeOne(n.Payload)
		}
	})
	return err
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
}
