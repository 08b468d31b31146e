package redislock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
)

// ErrUnknownPermit is returned by Permit.Release and Permit.Refresh for a
// permit the semaphore does not hold: released already, or expired.
var ErrUnknownPermit = errors.New("redislock: unknown or expired permit")

// Semaphore limits how many holders use a resource at once: at most its
// capacity in permits are out at any time. Each acquired Permit has its
// own id and lease on the server's clock (as Redisson's
// PermitExpirableSemaphore): a permit whose holder died comes back when its
// lease runs out, so a crash cannot shrink the semaphore for good.
type Semaphore struct {
	client   redis.UniversalClient
	name     string
	keys     [2]string
	channel  string
	capacity int
	lease    time.Duration
	notifier *notifier
}

// NewSemaphore returns the semaphore name with capacity permits; every
// process using name must give the same capacity. lease is how long a
// permit lasts unless refreshed. It does no I/O.
func NewSemaphore(client redis.UniversalClient, name string, capacity int, lease time.Duration) (*Semaphore, error) {
	if client == nil {
		return nil, errors.New("redislock: nil client")
	}
	if err := dlock.ValidateName(name); err != nil {
		return nil, err
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("redislock: semaphore capacity must be positive, got %d", capacity)
	}
	if lease <= 0 {
		return nil, fmt.Errorf("redislock: permit lease must be positive, got %v", lease)
	}
	k := keysFor(name)
	return &Semaphore{
		client: client, name: name, capacity: capacity, lease: lease,
		keys:     [2]string{k.lock + ":permits", k.lock + ":permit-sizes"},
		channel:  k.lock + ":permit-released",
		notifier: newNotifier(client),
	}, nil
}

// Permit is n permits held together until Release or their lease ends.
type Permit struct {
	ID string
	N  int
	s  *Semaphore
}

func (s *Semaphore) check(n int) error {
	if n <= 0 || n > s.capacity {
		return fmt.Errorf("redislock: cannot take %d permits of a semaphore of %d", n, s.capacity)
	}
	return nil
}

func (s *Semaphore) try(ctx context.Context, n int, id string) (bool, error) {
	ok, err := semAcquireScript.Run(ctx, s.client, s.keys[:], s.capacity, n, id, ms(s.lease)).Int64()
	return ok == 1, err
}

// TryAcquire takes n permits if they are free now; it returns
// dlock.ErrNotAcquired otherwise. ctx governs the request.
func (s *Semaphore) TryAcquire(ctx context.Context, n int) (*Permit, error) {
	if err := s.check(n); err != nil {
		return nil, err
	}
	id := randomID()
	ok, err := s.try(ctx, n, id)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w: %d permits of %q are not free", dlock.ErrNotAcquired, n, s.name)
	}
	return &Permit{ID: id, N: n, s: s}, nil
}

// Acquire takes n permits, waiting (woken by pub/sub when permits are
// released, and at least every permit lease, when permits can expire)
// until they are free or ctx ends.
func (s *Semaphore) Acquire(ctx context.Context, n int) (*Permit, error) {
	if err := s.check(n); err != nil {
		return nil, err
	}
	id := randomID()
	err := waitFor(ctx, s.notifier, s.channel, func() (bool, time.Duration, error) {
		ok, err := s.try(ctx, n, id)
		return ok, s.lease, err
	})
	if err != nil {
		return nil, err
	}
	return &Permit{ID: id, N: n, s: s}, nil
}

// Release gives the permits back and wakes waiters. It returns
// ErrUnknownPermit if they were already released or had expired.
func (p *Permit) Release(ctx context.Context) error {
	ok, err := semReleaseScript.Run(ctx, p.s.client, p.s.keys[:], p.ID, p.s.channel, p.s.notifier.publishCommand()).Int64()
	if err != nil {
		return err
	}
	if ok != 1 {
		return fmt.Errorf("%w: %s", ErrUnknownPermit, p.ID)
	}
	return nil
}

// Refresh extends the permits' lease by the semaphore's lease from now.
func (p *Permit) Refresh(ctx context.Context) error {
	ok, err := semRefreshScript.Run(ctx, p.s.client, p.s.keys[:], p.ID, ms(p.s.lease)).Int64()
	if err != nil {
		return err
	}
	if ok != 1 {
		return fmt.Errorf("%w: %s", ErrUnknownPermit, p.ID)
	}
	return nil
}

// Close closes the semaphore's pub/sub connection.
func (s *Semaphore) Close() error { return s.notifier.close() }

// randomID is a permit id: 64 random bits in hex.
func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b[:])
}
