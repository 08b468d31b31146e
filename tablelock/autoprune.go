package tablelock

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
)

// DefaultPruneIdle is how long a name's row stays after its last grant
// unless WithPruneIdle says otherwise: a day, as Redis keeps a name's
// fencing counter.
const DefaultPruneIdle = 24 * time.Hour

// pruneIdleKey is WithPruneIdle's setting.
type pruneIdleKey struct{}

// WithPruneIdle sets how long a name's row stays in the lock table after
// its name was last locked: a Locker deletes older free rows itself, in
// the background, with Prune, after a release, at most every tenth of
// idle (every minute at most often; the first a minute after New), so a table of per-entity names (order
// or user ids) holds the names used within idle, not every name ever
// locked. The default is DefaultPruneIdle; MinPruneIdle is the shortest
// (a shorter one is raised to it); 0 turns the background pruning off.
func WithPruneIdle(idle time.Duration) dlock.Option { return dlock.WithSetting(pruneIdleKey{}, idle) }

// pruner runs Prune in the background for a Locker: at most one run at
// a time, started by a release once interval has passed since the last,
// and stopped by close. It alone owns its fields.
type pruner struct {
	db       *sql.DB
	log      *slog.Logger
	idle     time.Duration
	interval time.Duration

	mu      sync.Mutex
	last    time.Time // when the last run started
	running bool
	closed  bool
	ctx     context.Context // cancelled by close
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

// newPruner returns the pruner of cfg's WithPruneIdle, or nil when it is
// off.
func newPruner(db *sql.DB, cfg dlock.Config) *pruner {
	idle := DefaultPruneIdle
	if v, ok := cfg.Setting(pruneIdleKey{}); ok {
		idle, _ = v.(time.Duration)
	}
	if idle <= 0 {
		return nil
	}
	idle = max(idle, MinPruneIdle)
	p := &pruner{db: db, log: cfg.Logger, idle: idle, interval: max(idle/10, time.Minute)}
	// The first run comes firstPruneAfter after New, not with the first
	// release: a Locker that lives for a few locks adds no statements,
	// and a fleet that starts together does not prune together.
	p.last = time.Now().Add(firstPruneAfter - p.interval)
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p
}

// firstPruneAfter is how long a new Locker waits before its first
// background prune.
const firstPruneAfter = time.Minute

// checkPruneIdle refuses a negative WithPruneIdle, before any I/O.
func checkPruneIdle(cfg dlock.Config) error {
	if v, ok := cfg.Setting(pruneIdleKey{}); ok {
		if d, _ := v.(time.Duration); d < 0 {
			return fmt.Errorf("tablelock: WithPruneIdle(%v): a negative idle time (0 turns background pruning off)", d)
		}
	}
	return nil
}

// poke starts a run when none runs and interval has passed since the
// last one started. It returns at once.
func (p *pruner) poke() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.running || time.Since(p.last) < p.interval {
		return
	}
	p.running, p.last = true, time.Now()
	p.done.Add(1)
	go p.run()
}

// pruneRunTimeout bounds one background run.
const pruneRunTimeout = 5 * time.Minute

func (p *pruner) run() {
	defer p.done.Done()
	ctx, cancel := context.WithTimeout(p.ctx, pruneRunTimeout)
	defer cancel()
	n, err := Prune(ctx, p.db, p.idle)
	switch {
	case err != nil && p.ctx.Err() == nil:
		p.log.Warn("tablelock: background prune failed; it runs again after the next release past its interval", "err", err, "deleted", n)
	case n > 0:
		p.log.Debug("tablelock: background prune", "deleted", n, "idle", p.idle)
	}
	p.mu.Lock()
	p.running = false
	p.mu.Unlock()
}

// setInterval changes how often runs may start (tests).
func (p *pruner) setInterval(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.interval = d
}

// close stops a run and waits for it; later pokes do nothing.
func (p *pruner) close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.done.Wait()
}
