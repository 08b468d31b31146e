package dlock

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"reflect"
	"slices"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of a Config.
const (
	// DefaultTTL is the lease time a Locker asks for: Redisson's watchdog
	// default. With auto-renewal on, a lease is renewed every TTL/3.
	DefaultTTL = 30 * time.Second
	// DefaultReleaseTimeout bounds each release request, and how long
	// Close and Do wait for releases after their ctx has ended.
	DefaultReleaseTimeout = 5 * time.Second
	// CancelMargin is how long past its ctx a call may take to return: the
	// time a backend is given to stop a request it already sent (cancel a
	// statement waiting on the server, leave a queue) before Client
	// returns anyway and leaves the clean-up to the background.
	CancelMargin = 200 * time.Millisecond
	// MinTTL is the shortest lease time accepted: a lease is renewed every
	// TTL/3 and must be confirmed by a round trip before its deadline,
	// which a shorter TTL leaves no room for (WithTTL(30) is 30ns, not 30s).
	MinTTL = 100 * time.Millisecond
	// DefaultHandOffs is how many times in a row a Locker passes a lock
	// straight from one of its call chains to the next (see WithHandOffs).
	DefaultHandOffs = 8
	// MaxOwnerLen is the longest owner label, in bytes: each hold is stored
	// under the label, '#' and a 16-digit hold id, within MaxNameLen.
	MaxOwnerLen = MaxNameLen - 17
)

// Config is the policy every Locker applies, whatever its backend. Build one
// with Options; NewConfig validates it once.
type Config struct {
	// Owner labels this Locker's holds on the server (and in Inspect, the
	// lock table, pg_stat_activity): each hold is stored as the label, '#'
	// and a random hold id. It is a label, not an identity: Lockers with the
	// same label are different owners. Default: host name and pid.
	Owner string
	// TTL is the lease time. Default DefaultTTL.
	TTL time.Duration
	// AutoRenew renews a held lease every TTL/3 until Unlock. Default true.
	AutoRenew bool
	// Backoff paces polling for backends that cannot push a wake-up, and
	// the fallback poll of those that can. Default ExponentialBackoff(2ms, 250ms).
	Backoff Backoff
	// PushFallback is the longest a waiter relies on a push wake-up alone
	// before it tries again anyway (a notification can be lost with its
	// connection). Default 2s.
	PushFallback time.Duration
	// Logger receives renewal failures and lease losses. Default: discard.
	Logger *slog.Logger
	// HandOffs is how many times in a row a hold ending may pass its lock
	// straight to the next call chain of the same Locker waiting for it,
	// where the backend can (see WithHandOffs). Default DefaultHandOffs.
	HandOffs int
	// MeterProvider and TracerProvider receive the Client's metrics and
	// spans (see WithMeterProvider). Default: OpenTelemetry's global
	// providers, which measure nothing until the application sets them.
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
	// NameTemplate maps a lock name to the dlock.name attribute of its
	// measurements (see WithNameTemplate). Default nil: no name attribute.
	NameTemplate func(name string) string

	// settings are backend packages' own settings (see WithSetting).
	settings map[any]any
	// given names the options of this package that were applied, for
	// Accepts.
	given map[string]bool
}

// Accepts returns an error when an option was given that ctor (a
// constructor, for the message) has no use for: an option of this package
// not named in allowed ("WithTTL"), or a setting (WithSetting) whose key
// is not in allowed. A constructor that builds on Client needs no such
// check; one that reads a Config for itself (a semaphore) calls it, so an
// option that would be ignored is an error instead.
func (c Config) Accepts(ctor string, allowed ...any) error {
	for _, name := range optionNames {
		if c.given[name] && !slices.Contains(allowed, any(name)) {
			return fmt.Errorf("%s does not take dlock.%s", ctor, name)
		}
	}
	for key := range c.settings {
		if !slices.Contains(allowed, key) {
			return fmt.Errorf("%s does not take an option of package %s", ctor, path.Base(packageOf(reflect.TypeOf(key))))
		}
	}
	return nil
}

// optionNames are the options of this package, in the order Accepts
// reports them.
var optionNames = []string{"WithOwner", "WithTTL", "WithoutAutoRenew", "WithBackoff", "WithLogger", "WithHandOffs",
	"WithMeterProvider", "WithTracerProvider", "WithNameTemplate"}

// given returns an Option that applies set and records name for Accepts.
func given(name string, set func(*Config)) Option {
	return func(c *Config) {
		if c.given == nil {
			c.given = map[string]bool{}
		}
		c.given[name] = true
		set(c)
	}
}

// WithSetting is how a backend package gives its own settings the one
// Option idiom: its exported option (redislock.WithReplicas) wraps
// WithSetting with a key of an unexported type of that package, and its
// New reads the value with Config.Setting. NewClient refuses a setting
// whose key comes from another package than the backend's, so an option
// given to the wrong New is an error, not silently ignored.
func WithSetting(key, value any) Option {
	return func(c *Config) {
		if c.settings == nil {
			c.settings = map[any]any{}
		}
		c.settings[key] = value
	}
}

// Setting returns the value WithSetting stored under key, and whether one
// was.
func (c Config) Setting(key any) (any, bool) {
	v, ok := c.settings[key]
	return v, ok
}

// Option sets one field of a Config.
type Option func(*Config)

// WithOwner sets the owner label shown for this Locker's holds (for example
// a service or host name). It does not make Lockers one owner: every hold
// is its own, whatever its label. The label must be a valid lock name (see
// ValidateName) of at most MaxOwnerLen bytes.
func WithOwner(label string) Option { return given("WithOwner", func(c *Config) { c.Owner = label }) }

// WithTTL sets the lease time, at least MinTTL. The default is DefaultTTL
// (30s). Backends round it up to their server's resolution.
func WithTTL(d time.Duration) Option { return given("WithTTL", func(c *Config) { c.TTL = d }) }

// WithoutAutoRenew turns the watchdog off: a lease then ends at its TTL
// unless Lease.Refresh extends it.
func WithoutAutoRenew() Option {
	return given("WithoutAutoRenew", func(c *Config) { c.AutoRenew = false })
}

// WithBackoff sets how waiting is paced when the backend cannot push a
// wake-up. The default is ExponentialBackoff(2ms, 250ms).
func WithBackoff(b Backoff) Option { return given("WithBackoff", func(c *Config) { c.Backoff = b }) }

// WithLogger sets the logger for renewal failures and lease losses. The
// default discards.
func WithLogger(l *slog.Logger) Option { return given("WithLogger", func(c *Config) { c.Logger = l }) }

// WithMeterProvider sends the Client's metrics to mp (see the list in
// the package doc, Telemetry) instead of OpenTelemetry's global provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return given("WithMeterProvider", func(c *Config) { c.MeterProvider = mp })
}

// WithTracerProvider sends the Client's spans to tp instead of
// OpenTelemetry's global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return given("WithTracerProvider", func(c *Config) { c.TracerProvider = tp })
}

// WithNameTemplate adds a dlock.name attribute to the Client's metrics
// and spans: f maps a lock name to it, and should map the names to few
// values ("invoice:123" to "invoice:*"), since each value is a series of
// its own. Without it, measurements carry no name.
func WithNameTemplate(f func(name string) string) Option {
	return given("WithNameTemplate", func(c *Config) { c.NameTemplate = f })
}

// WithHandOffs sets how many times in a row a lock may pass straight from
// one call chain of a Locker to the next one waiting for it through the
// same Locker, on backends that can do it in one request (the lock table,
// advisory locks, Redis's New and NewFair, ZooKeeper): the next holder is
// granted, with a new token, in the request that ends the last hold,
// instead of a release and an acquire.
// After n such hand-offs the lock is released through the server as
// usual, so that waiters of other processes get their turn; the lock
// table, the fair Redis lock and ZooKeeper also hand nothing on while the
// server knows of a waiter in another process. 0 turns hand-offs off. The
// default is DefaultHandOffs.
func WithHandOffs(n int) Option { return given("WithHandOffs", func(c *Config) { c.HandOffs = n }) }

// NewConfig applies opts over the defaults and validates the result.
func NewConfig(opts ...Option) (Config, error) {
	c := Config{
		TTL:          DefaultTTL,
		AutoRenew:    true,
		PushFallback: 2 * time.Second,
		HandOffs:     DefaultHandOffs,
	}
	for _, o := range opts {
		if o == nil {
			return Config{}, errors.New("dlock: nil Option")
		}
		o(&c)
	}
	if c.Owner == "" {
		c.Owner = defaultOwner()
	} else if err := ValidateName(c.Owner); err != nil {
		return Config{}, fmt.Errorf("dlock: owner label: %w", err)
	} else if len(c.Owner) > MaxOwnerLen {
		return Config{}, fmt.Errorf("dlock: owner label of %d bytes, the limit is %d", len(c.Owner), MaxOwnerLen)
	}
	if c.TTL < MinTTL {
		return Config{}, fmt.Errorf("dlock: TTL %v is shorter than MinTTL (%v): a lease could not be renewed in time (a bare number is nanoseconds; write 30*time.Second)", c.TTL, MinTTL)
	}
	if c.Backoff == nil {
		c.Backoff = ExponentialBackoff(2*time.Millisecond, 250*time.Millisecond)
	}
	if c.PushFallback <= 0 {
		return Config{}, fmt.Errorf("dlock: push fallback must be positive, got %v", c.PushFallback)
	}
	if c.HandOffs < 0 {
		return Config{}, fmt.Errorf("dlock: hand-offs must be 0 or more, got %d", c.HandOffs)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// defaultOwner is the default owner label: host name and pid, short
// enough to show whole where a server keeps little (PostgreSQL's
// application_name). Every hold adds its own random id to it.
func defaultOwner() string {
	host, _ := os.Hostname()
	id := fmt.Sprintf("%s/%d", host, os.Getpid())
	if len(id) > MaxOwnerLen {
		id = id[len(id)-MaxOwnerLen:]
	}
	return id
}
