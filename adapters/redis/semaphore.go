package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// ErrUnknownPermit is dlock.ErrUnknownPermit, returned by Permit.Release
// and Permit.Refresh for a permit no longer held.
var ErrUnknownPermit = dlock.ErrUnknownPermit

// Semaphore limits how many holders use a resource at once: at most its
// capacity in permits are out at any time. Each acquired Permit has its
// own id and lease on the server's clock (as Redisson's
// PermitExpirableSemaphore): a permit whose holder died comes back when its
// lease runs out, so a crash cannot shrink the semaphore for good.
//
// Permits are not dlock leases: nothing renews them and nothing tells the
// holder when one runs out. A holder that may work longer than the lease
// calls Permit.Refresh in time; Permit.Release says (ErrUnknownPermit)
// when the lease had already run out. Each permit carries a fencing token
// from the semaphore's counter.
type Semaphore struct {
	client   redis.UniversalClient
	name     string
	keys     [3]string
	channel  string
	capacity int
	lease    time.Duration
	notifier *notifierRef
	meter    *dlock.Meter
}

// NewSemaphore returns the semaphore name with capacity permits; every
// process using name must give the same capacity. A permit lasts the TTL
// (dlock.WithTTL, default dlock.DefaultTTL) unless refreshed. Its
// acquisitions and permits are measured as locks are (dlock.Meter:
// dlock.WithMeterProvider, WithTracerProvider, WithNameTemplate); any
// other option is refused, since none applies. It does no I/O.
func NewSemaphore(client redis.UniversalClient, name string, capacity int, opts ...dlock.Option) (*Semaphore, error) {
	if err := checkClient(client); err != nil {
		return nil, err
	}
	if err := dlock.ValidateName(name); err != nil {
		return nil, err
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("redislock: semaphore capacity must be positive, got %d", capacity)
	}
	cfg, err := dlock.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if err := only(cfg, "NewSemaphore"); err != nil {
		return nil, err
	}
	if err := cfg.Accepts("redislock: NewSemaphore", "WithTTL", "WithMeterProvider", "WithTracerProvider", "WithNameTemplate"); err != nil {
		return nil, err
	}
	lease := cfg.TTL
	k := keysFor(name)
	s := &Semaphore{
		client: client, name: name, capacity: capacity, lease: lease,
		keys:     [3]string{k.lock() + ":permits", k.lock() + ":permit-sizes", k.fence()},
		channel:  k.lock() + ":permit-released",
		notifier: notifierFor(client),
	}
	s.meter = dlock.NewMeter(cfg, s, name)
	return s, nil
}

// Permit is n permits held together until Release or their lease ends.
type Permit struct {
	id    string
	n     int
	token uint64
	s     *Semaphore
	hold  *dlock.HoldMeter
}

var (
	_ dlock.Semaphore = (*Semaphore)(nil)
	_ dlock.Permit    = (*Permit)(nil)
)

// ID is the permit's id in the semaphore's sorted set.
func (p *Permit) ID() string { return p.id }

// N is how many permits it holds.
func (p *Permit) N() int { return p.n }

// Token is a fencing token: it increases across the permits of one
// semaphore.
func (p *Permit) Token() uint64 { return p.token }

func (s *Semaphore) check(n int) error {
	if n <= 0 || n > s.capacity {
		return fmt.Errorf("redislock: cannot take %d permits of a semaphore of %d", n, s.capacity)
	}
	return nil
}

// try takes n permits as id: it returns the token when it did, else how
// long until the earliest permit expires.
func (s *Semaphore) try(ctx context.Context, n int, id string) (token uint64, wait time.Duration, err error) {
	res, err := semAcquireScript.Run(ctx, s.client, s.keys[:], s.capacity, n, id, ms(s.lease)).Int64Slice()
	if err != nil {
		return 0, 0, err
	}
	if !isReply(res) {
		return 0, 0, fmt.Errorf("redislock: semaphore script returned %v", res)
	}
	if res[0] == 1 {
		return uint64(res[1]), 0, nil
	}
	return 0, timeunit.Of(res[1], time.Millisecond), nil
}

// Available returns the permits free now and those in use; permits whose
// lease ran out count as free. ctx governs the request.
func (s *Semaphore) Available(ctx context.Context) (free, inUse int, err error) {
	res, err := semAvailableScript.Run(ctx, s.client, s.keys[:2], s.capacity).Int64Slice()
	if err != nil {
		return 0, 0, err
	}
	if !isReply(res) {
		return 0, 0, fmt.Errorf("redislock: semaphore script returned %v", res)
	}
	return int(res[0]), int(res[1]), nil
}

// TryAcquire takes n permits if they are free now; it returns
// dlock.ErrNotAcquired otherwise. ctx governs the request.
func (s *Semaphore) TryAcquire(ctx context.Context, n int) (dlock.Permit, error) {
	if err := s.check(n); err != nil {
		return nil, err
	}
	id := randomID()
	var token uint64
	hold, err := s.meter.Acquire(ctx, false, func(ctx context.Context) (uint64, error) {
		var err error
		if token, _, err = s.try(ctx, n, id); err == nil && token == 0 {
			err = fmt.Errorf("%w: %d permits of %q are not free", dlock.ErrNotAcquired, n, s.name)
		}
		return token, err
	})
	if err != nil {
		return nil, err
	}
	return &Permit{id: id, n: n, token: token, s: s, hold: hold}, nil
}

// Acquire takes n permits, waiting until they are free or ctx ends: woken
// by pub/sub when permits are released, and when the earliest permit's
// lease runs out.
func (s *Semaphore) Acquire(ctx context.Context, n int) (dlock.Permit, error) {
	if err := s.check(n); err != nil {
		return nil, err
	}
	id := randomID()
	var token uint64
	hold, err := s.meter.Acquire(ctx, true, func(ctx context.Context) (uint64, error) {
		err := waitFor(ctx, s.notifier, s.channel, func() (bool, time.Duration, error) {
			var wait time.Duration
			var err error
			token, wait, err = s.try(ctx, n, id)
			return token != 0, wait, err
		})
		return token, err
	})
	if err != nil {
		return nil, err
	}
	return &Permit{id: id, n: n, token: token, s: s, hold: hold}, nil
}

// Release gives the permits back and wakes waiters. It returns
// ErrUnknownPermit if they were already released or had expired.
func (p *Permit) Release(ctx context.Context) error {
	return p.hold.Release(ctx, p.release)
}

func (p *Permit) release(ctx context.Context) error {
	ok, err := semReleaseScript.Run(ctx, p.s.client, p.s.keys[:], p.id, p.s.channel, p.s.notifier.publishCommand()).Int64()
	if err != nil {
		return err
	}
	switch ok {
	case 1:
		return nil
	case -1:
		return fmt.Errorf("%w: %s had expired before its release", ErrUnknownPermit, p.id)
	}
	return fmt.Errorf("%w: %s", ErrUnknownPermit, p.id)
}

// Refresh extends the permits' lease by the semaphore's lease from now.
func (p *Permit) Refresh(ctx context.Context) error {
	ok, err := semRefreshScript.Run(ctx, p.s.client, p.s.keys[:], p.id, ms(p.s.lease)).Int64()
	if err != nil {
		return err
	}
	if ok != 1 {
		return fmt.Errorf("%w: %s", ErrUnknownPermit, p.id)
	}
	return nil
}

// Close gives back the semaphore's share of the client's pub/sub
// connection, which the last user closes.
func (s *Semaphore) Close() error { return s.notifier.release() }

// randomID is a random id (a permit's, a fair Locker's channel): 64 random
// bits in hex.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}

// DBSystem implements driver.DBSystem, for the semaphore's measurements
// (dlock.Meter).
func (s *Semaphore) DBSystem() string { return "redis" }
