package zklock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errjoin"
)

// ErrUnknownPermit is dlock.ErrUnknownPermit, returned by Permit.Release
// and Permit.Refresh for a permit no longer held.
var ErrUnknownPermit = dlock.ErrUnknownPermit

// Semaphore limits how many holders use a resource at once: at most its
// capacity in permits are out at any time. It is Curator's
// InterProcessSemaphoreV2: each Permit is an ephemeral sequential node in
// the name's lease directory, so the permits of a process that dies come
// back when its session ends.
//
// It is herd-free: an acquirer first takes the name's internal mutex (a
// Locker queue, each waiter watching only its predecessor), and only the
// mutex holder watches the lease directory, so a release wakes one client.
// Waiters are served in order; a large request is not overtaken by small
// ones behind it.
type Semaphore struct {
	mutex, leases *backend
	name          string
	capacity      int
	meter         *dlock.Meter
}

// NewSemaphore returns the semaphore name with capacity permits under
// root; every process using name must give the same capacity. It does no
// I/O; conn stays the caller's. Of the options, WithACL applies, and
// dlock.WithMeterProvider, WithTracerProvider and WithNameTemplate, for
// its measurements (dlock.Meter); permits last as long as their session,
// so a TTL does not apply, and any other option is refused.
func NewSemaphore(conn *zk.Conn, root, name string, capacity int, opts ...dlock.Option) (*Semaphore, error) {
	if conn == nil {
		return nil, errors.New("zklock: nil *zk.Conn")
	}
	if err := validRoot(root); err != nil {
		return nil, err
	}
	if err := dlock.ValidateName(name); err != nil {
		return nil, err
	}
	if capacity <= 0 {
		return nil, fmt.Errorf("zklock: semaphore capacity must be positive, got %d", capacity)
	}
	cfg, err := dlock.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if err := cfg.Accepts("zklock: NewSemaphore", aclKey{}, "WithMeterProvider", "WithTracerProvider", "WithNameTemplate"); err != nil {
		return nil, err
	}
	acl, err := aclOf(cfg)
	if err != nil {
		return nil, err
	}
	s := &Semaphore{
		mutex:    newBackend(conn, root, mutex{}, ".sem"),
		leases:   newBackend(conn, root, leases{}, ".leases"),
		name:     name,
		capacity: capacity,
	}
	s.mutex.acl, s.leases.acl = acl, acl
	s.meter = dlock.NewMeter(cfg, s, name)
	return s, nil
}

// Permit is n permits held together until Release or the end of the
// session that took them.
type Permit struct {
	id    string
	n     int
	token uint64
	s     *Semaphore
	hold  holdNode
	meter *dlock.HoldMeter
}

var (
	_ dlock.Semaphore = (*Semaphore)(nil)
	_ dlock.Permit    = (*Permit)(nil)
)

// ID is the permit's lease node.
func (p *Permit) ID() string { return p.id }

// N is how many permits it holds.
func (p *Permit) N() int { return p.n }

// Token is the lease node's Czxid: it increases across the permits of the
// ensemble, a fencing token for what the permit guards.
func (p *Permit) Token() uint64 { return p.token }

func (s *Semaphore) check(n int) error {
	if n <= 0 || n > s.capacity {
		return fmt.Errorf("zklock: cannot take %d permits of a semaphore of %d", n, s.capacity)
	}
	return nil
}

// TryAcquire takes n permits if they are free now; it returns
// dlock.ErrNotAcquired otherwise, also when another client is acquiring.
func (s *Semaphore) TryAcquire(ctx context.Context, n int) (dlock.Permit, error) {
	return s.acquire(ctx, n, false)
}

// Acquire takes n permits, waiting until they are free or ctx ends; a
// cancelled Acquire leaves no node behind.
func (s *Semaphore) Acquire(ctx context.Context, n int) (dlock.Permit, error) {
	return s.acquire(ctx, n, true)
}

// acquire is TryAcquire (wait false) or Acquire. A wait that ctx ended
// fails with dlock.ErrNotAcquired joined with ctx's error, as a Lock does.
func (s *Semaphore) acquire(ctx context.Context, n int, wait bool) (dlock.Permit, error) {
	if err := s.check(n); err != nil {
		return nil, err
	}
	var p *Permit
	hold, err := s.meter.Acquire(ctx, wait, func(ctx context.Context) (uint64, error) {
		taken, err := s.take(ctx, n, wait)
		if err != nil && ctx.Err() != nil && !errors.Is(err, dlock.ErrNotAcquired) {
			err = errjoin.Join(dlock.ErrNotAcquired, ctx.Err(), err)
		}
		if err != nil {
			return 0, err
		}
		p = taken.(*Permit)
		return p.token, nil
	})
	if err != nil {
		return nil, err
	}
	p.meter = hold
	return p, nil
}

// take takes n permits: under the semaphore's mutex (Curator's
// InterProcessSemaphoreV2 recipe), it queues a lease node and waits until
// the leases before it leave room.
func (s *Semaphore) take(ctx context.Context, n int, wait bool) (dlock.Permit, error) {
	var g [16]byte
	_, _ = rand.Read(g[:])
	r := driver.Request{Name: s.name, Owner: hex.EncodeToString(g[:]), Wait: wait}
	mutex, err := s.enter(ctx, r)
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.mutex.Release(context.WithoutCancel(ctx), driver.Hold{Handle: mutex.Handle}) }()
	return s.lease(ctx, r, n)
}

// enter takes the semaphore's mutex for r.
func (s *Semaphore) enter(ctx context.Context, r driver.Request) (driver.Grant, error) {
	var mutex driver.Grant
	var err error
	if r.Wait {
		mutex, err = s.mutex.AcquireWait(ctx, r)
	} else {
		mutex, err = s.mutex.Acquire(ctx, r)
	}
	if err == nil && !mutex.Acquired {
		err = fmt.Errorf("%w: semaphore %q is being acquired by another client", dlock.ErrNotAcquired, s.name)
	}
	return mutex, err
}

// lease queues r's lease node for n permits and waits (r.Wait) until the
// leases leave room for it.
func (s *Semaphore) lease(ctx context.Context, r driver.Request, n int) (dlock.Permit, error) {
	b := s.leases
	dir := b.dir(s.name)
	node, tokenOf, _, err := b.create(ctx, dir, r.Owner, "lease-"+strconv.Itoa(n))
	if err != nil {
		return nil, err
	}
	session := b.conn.SessionID()
	leave := func(cause error) (dlock.Permit, error) {
		b.remove(dir, node, session)
		return nil, cause
	}
	for {
		var children []string
		var watch <-chan zk.Event
		err := b.retry(ctx, session, func() (err error) {
			children, _, watch, err = b.conn.ChildrenW(dir)
			return err
		})
		switch {
		case err != nil:
			return leave(err)
		case !slices.Contains(children, path.Base(node)):
			// Deleted while this session lives (by an operator, or a
			// cleanup): join the queue again, as Curator does. Gone with
			// the session: the permit cannot be had on it.
			if b.conn.SessionID() != session {
				return nil, fmt.Errorf("%w: the lease node %s is gone", ErrSessionExpired, node)
			}
			if node, tokenOf, _, err = b.create(ctx, dir, r.Owner, "lease-"+strconv.Itoa(n)); err != nil {
				return nil, err
			}
			continue
		case used(children) <= s.capacity:
			token, _, err := tokenOf()
			if err != nil {
				return leave(err)
			}
			return &Permit{id: node, n: n, token: token, s: s, hold: holdNode{node, session}}, nil
		case !r.Wait:
			return leave(fmt.Errorf("%w: %d permits of %q are not free", dlock.ErrNotAcquired, n, s.name))
		}
		select {
		case <-watch:
		case <-ctx.Done():
			return leave(errjoin.Join(dlock.ErrNotAcquired, ctx.Err()))
		}
	}
}

// used is the sum of the permits of the lease nodes named in children
// ("_c_" GUID "-lease-" n "-" sequence).
func used(children []string) int {
	total := 0
	for _, c := range children {
		_, rest, ok := strings.Cut(c, "-lease-")
		if !ok {
			continue
		}
		digits, _, _ := strings.Cut(rest, "-")
		n, err := strconv.Atoi(digits)
		if err != nil || n <= 0 {
			n = 1 // not ours: count it as one permit rather than none
		}
		total += n
	}
	return total
}

// Release gives the permits back, waking the client at the head of the
// queue. It returns ErrUnknownPermit if they were already released or went
// with their session.
func (p *Permit) Release(ctx context.Context) error {
	return p.meter.Release(ctx, p.release)
}

func (p *Permit) release(ctx context.Context) error {
	if err := p.s.leases.Release(ctx, driver.Hold{Handle: p.hold}); err != nil {
		if errors.Is(err, dlock.ErrNotHeld) {
			return fmt.Errorf("%w: %s", ErrUnknownPermit, p.id)
		}
		return err
	}
	return nil
}

// Refresh checks that the permits are still held: the session that took
// them is the connection's and their node exists. It returns
// ErrUnknownPermit if not, and another error if it cannot tell.
func (p *Permit) Refresh(ctx context.Context) error {
	err := p.s.leases.Refresh(ctx, driver.Hold{Handle: p.hold})
	if errors.Is(err, dlock.ErrNotHeld) {
		return fmt.Errorf("%w: %w", ErrUnknownPermit, err)
	}
	return err
}

// DBSystem implements driver.DBSystem, for the semaphore's measurements
// (dlock.Meter).
func (s *Semaphore) DBSystem() string { return "zookeeper" }
