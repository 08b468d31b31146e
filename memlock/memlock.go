// Package memlock is an in-memory lock server and its dlock Locker, for
// unit tests of code that locks: no server to start, and faults on
// demand. Lockers made on one Server exclude each other as Lockers of
// separate processes on one lock server do; everything dlock.Client adds
// (waiting, re-entry along a call chain, renewal, the lease's deadline,
// loss signalling) is the real thing, so application code sees leases
// end, renewals fail and Locks wait as it would in production:
//
//   - Expire(name) ends the current hold of name now, as an expiry on the
//     server would: its lease's Done closes at once, and the name is
//     granted to nobody else until then;
//   - FailRenewals(name, n, err) makes the next n renewals of name fail;
//   - Block(name) makes every attempt to take name wait until Unblock
//     (or its ctx ends), as a slow server would;
//   - Down(err) makes every request fail with err until Down(nil).
//
// The Locker passes dlocktest's conformance suite, keeps records
// (dlock.Recorder: elections and scheduled jobs work on it) and answers
// Inspect.
package memlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// Server is an in-memory lock server. The zero Server is not ready: make
// one with NewServer. It is safe for concurrent use.
type Server struct {
	mu       sync.Mutex
	locks    map[string]*lock
	tokens   map[string]uint64
	records  map[string]record
	failures map[string]failure
	blocked  map[string]chan struct{}
	subs     map[string]map[chan struct{}]struct{}
	down     error
}

type lock struct {
	owner    string
	payload  string    // driver.Request.Payload
	granted  time.Time // when the hold began
	token    uint64
	reentry  int
	expires  time.Time
	lost     chan error // Grant.Lost: Expire sends the cause
	expiring bool       // Expire ended it: free once released, or at expires
}

type record struct {
	value []byte
	token uint64
	since time.Time
}

type failure struct {
	n   int
	err error
}

// NewServer returns an empty Server.
func NewServer() *Server {
	return &Server{
		locks:    map[string]*lock{},
		tokens:   map[string]uint64{},
		records:  map[string]record{},
		failures: map[string]failure{},
		blocked:  map[string]chan struct{}{},
		subs:     map[string]map[chan struct{}]struct{}{},
	}
}

// Locker is a Locker on a Server: one process's, as far as the Server can
// tell. Close it when done.
type Locker struct {
	*dlock.Client
}

var (
	_ dlock.Locker    = (*Locker)(nil)
	_ dlock.Inspector = (*Locker)(nil)
	_ dlock.Recorder  = (*Locker)(nil)
)

// NewLocker returns a Locker on s with opts (dlock.WithTTL and the rest).
func NewLocker(s *Server, opts ...dlock.Option) (*Locker, error) {
	if s == nil || s.locks == nil {
		return nil, errors.New("memlock: nil or zero Server: make one with NewServer")
	}
	c, err := dlock.NewClient(backend{s}, opts...)
	if err != nil {
		return nil, err
	}
	return &Locker{Client: c}, nil
}

// ErrInjected is what a renewal made to fail by FailRenewals returns when
// given no error of its own.
var ErrInjected = errors.New("memlock: injected failure")

// Expire ends the current hold of name now, as if its lease had run out
// on the server: its holder's lease ends at once (Done closes, Err wraps
// dlock.ErrLost), and the name is free as soon as that holder has let it
// go (at the latest one TTL later, as a holder that died would). It
// reports whether name was held.
func (s *Server) Expire(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.locks[name]
	if l == nil || l.expiring || !time.Now().Before(l.expires) {
		return false
	}
	l.expiring = true
	l.lost <- errors.New("memlock: expired by the test (Server.Expire)")
	return true
}

// FailRenewals makes the next n renewals of name fail with err
// (ErrInjected when nil); a renewal that fails past the lease's deadline
// loses the lease. n 0 ends the failures.
func (s *Server) FailRenewals(name string, n int, err error) {
	if err == nil {
		err = ErrInjected
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n <= 0 {
		delete(s.failures, name)
		return
	}
	s.failures[name] = failure{n, err}
}

// Block makes every attempt to take name wait, until Unblock or until the
// attempt's ctx ends.
func (s *Server) Block(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blocked[name] == nil {
		s.blocked[name] = make(chan struct{})
	}
}

// Unblock lets the attempts Block holds go on.
func (s *Server) Unblock(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ch := s.blocked[name]; ch != nil {
		close(ch)
		delete(s.blocked, name)
	}
}

// Down makes every request fail with err, as an unreachable server; nil
// brings the Server back.
func (s *Server) Down(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = err
}

// wake tells name's subscribers it may be free. s.mu must be held.
func (s *Server) wake(name string) {
	for ch := range s.subs[name] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// holder is l's holder as Inspect reports it at now.
func (l *lock) holder(now time.Time) dlock.Holder {
	return dlock.Holder{Owner: l.owner, Token: l.token, TTL: l.expires.Sub(now), Payload: l.payload, Age: now.Sub(l.granted)}
}

// free reports whether name's lock l can be granted to another owner at
// now. s.mu must be held.
func free(l *lock, now time.Time) bool {
	return l == nil || !now.Before(l.expires)
}

// backend is the Server as a dlock driver.Backend.
type backend struct{ s *Server }

var (
	_ driver.Backend       = backend{}
	_ driver.Notifier      = backend{}
	_ driver.DeadlineBound = backend{}
	_ driver.CancelBound   = backend{}
	_ dlock.Inspector      = backend{}
	_ dlock.Recorder       = backend{}
	_ driver.PayloadKeeper = backend{}
)

// KeepsPayload implements driver.PayloadKeeper.
func (backend) KeepsPayload() bool { return true }

// BoundsCalls implements driver.DeadlineBound: every call returns by its
// ctx's deadline.
func (backend) BoundsCalls() bool { return true }

// EndsOnCancel implements driver.CancelBound: a call waiting for a
// blocked name or a Server that is down returns when its ctx ends.
func (backend) EndsOnCancel() bool { return true }

// Identity implements dlock.Identifier.
func (b backend) Identity() string { return fmt.Sprintf("memlock:%p", b.s) }

// enter waits while name is blocked and fails while the Server is down;
// it returns with s.mu held when err is nil.
func (b backend) enter(ctx context.Context, name string) error {
	s := b.s
	for {
		s.mu.Lock()
		if s.down != nil {
			err := s.down
			s.mu.Unlock()
			return err
		}
		ch := s.blocked[name]
		if ch == nil {
			return nil
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b backend) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	if err := b.enter(ctx, r.Name); err != nil {
		return driver.Grant{}, err
	}
	s := b.s
	defer s.mu.Unlock()
	now := time.Now()
	l := s.locks[r.Name]
	switch {
	case free(l, now):
		s.tokens[r.Name]++
		l = &lock{owner: r.Owner, payload: r.Payload, granted: now, token: s.tokens[r.Name], reentry: 1, expires: now.Add(r.TTL), lost: make(chan error, 1)}
		s.locks[r.Name] = l
		return driver.Grant{Acquired: true, Token: l.token, Lost: l.lost}, nil
	case l.owner == r.Owner && !l.expiring:
		l.reentry++
		l.expires = now.Add(r.TTL)
		return driver.Grant{Acquired: true, Token: l.token, Lost: l.lost}, nil
	}
	return driver.Grant{RetryAfter: l.expires.Sub(now)}, nil
}

// held returns h's lock, with s.mu held.
func (b backend) held(h driver.Hold) (*lock, error) {
	l := b.s.locks[h.Name]
	if l == nil || l.owner != h.Owner || h.Token != 0 && l.token != h.Token || !time.Now().Before(l.expires) {
		return nil, fmt.Errorf("%w: %q", dlock.ErrNotHeld, h.Name)
	}
	return l, nil
}

func (b backend) Refresh(ctx context.Context, h driver.Hold) error {
	if err := b.enter(ctx, ""); err != nil {
		return err
	}
	s := b.s
	defer s.mu.Unlock()
	if f, ok := s.failures[h.Name]; ok {
		if f.n--; f.n <= 0 {
			delete(s.failures, h.Name)
		} else {
			s.failures[h.Name] = f
		}
		return f.err
	}
	l, err := b.held(h)
	if err != nil {
		return err
	}
	if l.expiring {
		return fmt.Errorf("%w: %q expired (Server.Expire)", dlock.ErrNotHeld, h.Name)
	}
	l.expires = time.Now().Add(h.TTL)
	return nil
}

func (b backend) Release(ctx context.Context, h driver.Hold) error {
	if err := b.enter(ctx, ""); err != nil {
		return err
	}
	s := b.s
	defer s.mu.Unlock()
	l, err := b.held(h)
	if err != nil {
		return err
	}
	if l.reentry--; l.reentry <= 0 || l.expiring {
		delete(s.locks, h.Name)
		s.wake(h.Name)
	}
	return nil
}

// Subscribe implements driver.Notifier: a release or an expiry wakes the
// name's waiters.
func (b backend) Subscribe(ctx context.Context, r driver.Request) (<-chan struct{}, func(), error) {
	if err := b.enter(ctx, ""); err != nil {
		return nil, nil, err
	}
	s := b.s
	defer s.mu.Unlock()
	ch := make(chan struct{}, 1)
	if s.subs[r.Name] == nil {
		s.subs[r.Name] = map[chan struct{}]struct{}{}
	}
	s.subs[r.Name][ch] = struct{}{}
	return ch, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs[r.Name], ch)
		if len(s.subs[r.Name]) == 0 {
			delete(s.subs, r.Name)
		}
	}, nil
}

// Inspect implements dlock.Inspector.
func (b backend) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	if err := b.enter(ctx, ""); err != nil {
		return dlock.Holder{}, false, err
	}
	s := b.s
	defer s.mu.Unlock()
	l := s.locks[name]
	now := time.Now()
	if free(l, now) {
		return dlock.Holder{}, false, nil
	}
	return l.holder(now), true, nil
}

// ForceRelease implements dlock.ForceReleaser: the holder's next renewal
// finds its hold gone.
func (b backend) ForceRelease(ctx context.Context, name string) (dlock.Holder, bool, error) {
	if err := b.enter(ctx, ""); err != nil {
		return dlock.Holder{}, false, err
	}
	s := b.s
	defer s.mu.Unlock()
	l := s.locks[name]
	now := time.Now()
	if free(l, now) {
		return dlock.Holder{}, false, nil
	}
	h := l.holder(now)
	l.owner, l.reentry, l.expires = "", 0, time.Time{}
	s.wake(name)
	return h, true, nil
}

// List implements dlock.Lister.
func (b backend) List(ctx context.Context, prefix string, limit int) ([]dlock.Held, error) {
	if err := b.enter(ctx, ""); err != nil {
		return nil, err
	}
	s := b.s
	defer s.mu.Unlock()
	now := time.Now()
	var held []dlock.Held
	for name, l := range s.locks {
		if strings.HasPrefix(name, prefix) && !free(l, now) {
			held = append(held, dlock.Held{Name: name, Holder: l.holder(now), Waiters: dlock.UnknownWaiters})
		}
	}
	slices.SortFunc(held, func(a, b dlock.Held) int { return strings.Compare(a.Name, b.Name) })
	return held[:min(len(held), limit)], nil
}

// Record implements dlock.Recorder.
func (b backend) Record(ctx context.Context, name string, token uint64, value []byte) error {
	if err := b.enter(ctx, ""); err != nil {
		return err
	}
	s := b.s
	defer s.mu.Unlock()
	r, ok := s.records[name]
	switch {
	case ok && r.token > token:
		return fmt.Errorf("%w: record %q, token %d", dlock.ErrStale, name, token)
	case !ok || r.token < token:
		r.since = time.Now()
	}
	r.value, r.token = append([]byte(nil), value...), token
	s.records[name] = r
	return nil
}

// Recorded implements dlock.Recorder.
func (b backend) Recorded(ctx context.Context, name string) (dlock.Record, bool, error) {
	if err := b.enter(ctx, ""); err != nil {
		return dlock.Record{}, false, err
	}
	s := b.s
	defer s.mu.Unlock()
	r, ok := s.records[name]
	if !ok {
		return dlock.Record{}, false, nil
	}
	return dlock.Record{Value: append([]byte(nil), r.value...), Token: r.token, Age: time.Since(r.since)}, true, nil
}
