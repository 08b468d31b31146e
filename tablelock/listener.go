package tablelock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/internal/errjoin"
)

// listenerIdle is how long a listener connection stays open with no waiter,
// so bursts of contention do not pay for a new LISTEN each time.
const listenerIdle = 30 * time.Second

// listener is one LISTEN connection per *sql.DB, shared by the waiters of
// every Locker on it. It runs while anyone waits (and listenerIdle after),
// and hands each release notification to the waiters of that name.
type listener struct {
	db   *sql.DB
	log  *slog.Logger
	refs int // Lockers using it; guarded by listenersMu

	mu      sync.Mutex
	subs    map[string]map[chan struct{}]struct{}
	n       int        // subscriptions
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

var (
	listenersMu sync.Mutex
	listeners   = map[*sql.DB]*listener{}
)

// listenerFor returns db's shared listener; release it with unref.
func listenerFor(db *sql.DB, log *slog.Logger) *listener {
	listenersMu.Lock()
	defer listenersMu.Unlock()
	l := listeners[db]
	if l == nil {
		l = &listener{db: db, log: log, subs: make(map[string]map[chan struct{}]struct{})}
		listeners[db] = l
	}
	l.refs++
	return l
}

// unref drops a Locker's use of l; the last one closes it.
func (l *listener) unref() {
	listenersMu.Lock()
	l.refs--
	last := l.refs == 0
	if last {
		delete(listeners, l.db)
	}
	listenersMu.Unlock()
	if last {
		l.close()
	}
}

// subscribe registers a waiter for name and returns once LISTEN is in
// effect, so no release after it is missed.
func (l *listener) subscribe(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, nil, errors.New("tablelock: listener closed")
	}
	if l.subs[name] == nil {
		l.subs[name] = make(map[chan struct{}]struct{})
	}
	l.subs[name][ch] = struct{}{}
	l.n++
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
	cancel := func() { once.Do(func() { l.unsubscribe(name, ch) }) }
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

func (l *listener) unsubscribe(name string, ch chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.subs[name], ch)
	if len(l.subs[name]) == 0 {
		delete(l.subs, name)
	}
	l.n--
	if l.n == 0 && l.gen != nil {
		gen := l.gen
		l.idle = time.AfterFunc(listenerIdle, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.n == 0 && l.gen == gen {
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
		l.wakeAll()
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
	if l.gen == nil && l.n > 0 && !l.closed {
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
	defer conn.Close()
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
		l.mu.Lock()
		l.wakeAll()
		l.mu.Unlock()
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				return errjoin.Join(err, driver.ErrBadConn)
			}
			l.wake(n.Payload)
		}
	})
	return err
}

func (l *listener) wake(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.subs[name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// wakeAll wakes every waiter. l.mu must be held.
func (l *listener) wakeAll() {
	for _, set := range l.subs {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
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
