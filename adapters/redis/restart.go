package redislock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// restartWindowKey is the key of WithRestartWindow's setting.
type restartWindowKey struct{}

// WithRestartWindow bounds the hold-back of a restarted server (see
// Restarts in the package doc): d is the longest TTL of any lease of the
// server's names, so a server that has been up for d has surely outlived
// every hold it may have forgotten, and grants again. Without it, each
// attempt's own TTL is the window: right when every Locker of a name uses
// one TTL, and the longest wait for a long one (a 1 h TTL waits an hour
// after a restart). d must be at least dlock.MinTTL. For New and
// NewRedlock.
func WithRestartWindow(d time.Duration) dlock.Option {
	return dlock.WithSetting(restartWindowKey{}, d)
}

// restartWindowOf reads WithRestartWindow from cfg: 0 when unset.
func restartWindowOf(cfg dlock.Config) (time.Duration, error) {
	v, ok := cfg.Setting(restartWindowKey{})
	if !ok {
		return 0, nil
	}
	d := v.(time.Duration)
	if d < dlock.MinTTL {
		return 0, fmt.Errorf("redislock: WithRestartWindow(%v): the window must be at least dlock.MinTTL (%v)", d, dlock.MinTTL)
	}
	return d, nil
}

// durableRecheck is how often a Locker asks whether its server fsyncs
// every write.
const durableRecheck = 10 * time.Second

// restarts is what a Locker knows of how long its server holds grants
// back after a restart: the window WithRestartWindow sets, and, for one
// server (not a Cluster or Ring), whether it fsyncs every write before it
// answers (appendonly yes with appendfsync always): such a server restarts
// with every hold it granted, and holds nothing back. It asks with CONFIG
// GET, at most every durableRecheck; a server that refuses CONFIG (a
// managed service that renames it) counts as one that may lose writes.
type restarts struct {
	window time.Duration
	client *redis.Client // nil: never durable

	mu      sync.Mutex
	checked time.Time
	durable bool
}

func newRestarts(client redis.UniversalClient, window time.Duration) *restarts {
	c, _ := client.(*redis.Client)
	return &restarts{window: window, client: c}
}

// arg is the acquire script's hold-back window argument: "0" for a
// durable server, the window in ms when set, "" for the request's TTL.
func (r *restarts) arg(ctx context.Context) string {
	if r == nil { // a backend made without New: the request's TTL
		return ""
	}
	if r.isDurable(ctx) {
		return "0"
	}
	if r.window > 0 {
		return strconv.FormatInt(ms(r.window), 10)
	}
	return ""
}

func (r *restarts) isDurable(ctx context.Context) bool {
	if r == nil || r.client == nil {
		return false
	}
	r.mu.Lock()
	if time.Since(r.checked) < durableRecheck {
		d := r.durable
		r.mu.Unlock()
		return d
	}
	r.mu.Unlock()
	cfg, err := r.client.ConfigGet(ctx, "append*").Result()
	durable := err == nil && cfg["appendonly"] == "yes" && cfg["appendfsync"] == "always"
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil || r.checked.IsZero() {
		r.checked, r.durable = time.Now(), durable
	}
	return r.durable
}

// notGranted is the grant of an acquire script's {0, ms to retry in}
// reply, or of its held_back_reply: {0, ms to retry in, the server's
// uptime in ms, ms until it grants again} (see scripts/token.lua).
func notGranted(res []int64, least int64) driver.Grant {
	g := driver.Grant{RetryAfter: timeunit.Of(max(res[1], least), time.Millisecond)}
	if len(res) == 4 {
		g.HeldBack = driver.HoldBack{Up: timeunit.Of(res[2], time.Millisecond), Resume: timeunit.Of(max(res[3], 1), time.Millisecond)}
	}
	return g
}

// isReply reports whether res is a reply of an acquire script.
func isReply(res []int64) bool { return len(res) == 2 || len(res) == 4 }
