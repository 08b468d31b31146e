package dlock

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Defaults of a Config.
const (
	// DefaultTTL is the lease time a Locker asks for: Redisson's watchdog
	// default. With auto-renewal on, a lease is renewed every TTL/3.
	DefaultTTL = 30 * time.Second
	// DefaultReleaseTimeout bounds the release of a lease that ended
	// without Unlock (lost, or ended by Close).
	DefaultReleaseTimeout = 5 * time.Second
)

// Config is the policy every Locker applies, whatever its backend. Build one
// with Options; NewConfig validates it once.
type Config struct {
	// Owner identifies this Locker's owner on the server. Default: a random
	// id per Locker (host name, pid and 64 random bits).
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
}

// Option sets one field of a Config.
type Option func(*Config)

// WithOwner sets the owner id. Lockers with the same owner id are the same
// owner where the backend stores owners on the server (tablelock, redis): a
// lock held by one is re-entered by the other. The id must be a valid lock
// name (see ValidateName).
func WithOwner(id string) Option { return func(c *Config) { c.Owner = id } }

// WithTTL sets the lease time; it must be positive. The default is
// DefaultTTL (30s). Backends round it up to their server's resolution.
func WithTTL(d time.Duration) Option { return func(c *Config) { c.TTL = d } }

// WithoutAutoRenew turns the watchdog off: a lease then ends at its TTL
// unless Lease.Refresh extends it.
func WithoutAutoRenew() Option { return func(c *Config) { c.AutoRenew = false } }

// WithBackoff sets how waiting is paced when the backend cannot push a
// wake-up. The default is ExponentialBackoff(2ms, 250ms).
func WithBackoff(b Backoff) Option { return func(c *Config) { c.Backoff = b } }

// WithLogger sets the logger for renewal failures and lease losses. The
// default discards.
func WithLogger(l *slog.Logger) Option { return func(c *Config) { c.Logger = l } }

// NewConfig applies opts over the defaults and validates the result.
func NewConfig(opts ...Option) (Config, error) {
	c := Config{
		TTL:          DefaultTTL,
		AutoRenew:    true,
		PushFallback: 2 * time.Second,
	}
	for _, o := range opts {
		if o == nil {
			return Config{}, errors.New("dlock: nil Option")
		}
		o(&c)
	}
	if c.Owner == "" {
		c.Owner = randomOwner()
	} else if err := ValidateName(c.Owner); err != nil {
		return Config{}, fmt.Errorf("dlock: owner id: %w", err)
	}
	if c.TTL <= 0 {
		return Config{}, fmt.Errorf("dlock: TTL must be positive, got %v", c.TTL)
	}
	if c.Backoff == nil {
		c.Backoff = ExponentialBackoff(2*time.Millisecond, 250*time.Millisecond)
	}
	if c.PushFallback <= 0 {
		return Config{}, fmt.Errorf("dlock: push fallback must be positive, got %v", c.PushFallback)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

func randomOwner() string {
	host, _ := os.Hostname()
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	id := fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	if len(id) > MaxNameLen {
		id = id[len(id)-MaxNameLen:]
	}
	return id
}
