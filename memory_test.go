package dlock_test

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
)

// memory is an in-process Backend for testing the policy in Client: it
// keeps expiries on its own clock and can be told to fail, as a server
// that became unreachable would.
type memory struct {
	mu       sync.Mutex
	locks    map[string]*memLock
	tokens   map[string]uint64
	failNext error // every call fails with it while set
	refreshN int
}

type memLock struct {
	owner   string
	token   uint64
	reentry int
	expires time.Time
}

func newMemory() *memory {
	return &memory{locks: map[string]*memLock{}, tokens: map[string]uint64{}}
}

func (m *memory) fail(err error) {
	m.mu.Lock()
	m.failNext = err
	m.mu.Unlock()
}

func (m *memory) Acquire(_ context.Context, r dlock.Request) (dlock.Grant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failNext != nil {
		return dlock.Grant{}, m.failNext
	}
	now := time.Now()
	l := m.locks[r.Name]
	switch {
	case l == nil || !now.Before(l.expires):
		m.tokens[r.Name]++
		m.locks[r.Name] = &memLock{owner: r.Owner, token: m.tokens[r.Name], reentry: 1, expires: now.Add(r.TTL)}
		return dlock.Grant{Acquired: true, Token: m.tokens[r.Name]}, nil
	case l.owner == r.Owner:
		l.reentry++
		l.expires = now.Add(r.TTL)
		return dlock.Grant{Acquired: true, Token: l.token}, nil
	}
	return dlock.Grant{RetryAfter: time.Until(l.expires)}, nil
}

func (m *memory) held(h dlock.Hold) (*memLock, error) {
	if m.failNext != nil {
		return nil, m.failNext
	}
	l := m.locks[h.Name]
	if l == nil || l.owner != h.Owner || l.token != h.Token || !time.Now().Before(l.expires) {
		return nil, dlock.ErrNotHeld
	}
	return l, nil
}

func (m *memory) Refresh(_ context.Context, h dlock.Hold) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refreshN++
	l, err := m.held(h)
	if err != nil {
		return err
	}
	l.expires = time.Now().Add(h.TTL)
	return nil
}

func (m *memory) Release(_ context.Context, h dlock.Hold) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, err := m.held(h)
	if err != nil {
		return err
	}
	if l.reentry--; l.reentry == 0 {
		delete(m.locks, h.Name)
	}
	return nil
}

func (m *memory) Inspect(_ context.Context, name string) (dlock.Holder, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.locks[name]
	if l == nil || !time.Now().Before(l.expires) {
		return dlock.Holder{}, false, nil
	}
	return dlock.Holder{Owner: l.owner, Token: l.token, TTL: time.Until(l.expires)}, true, nil
}

// stolen makes name look taken over by another owner on the server.
func (m *memory) stolen(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokens[name]++
	m.locks[name] = &memLock{owner: "thief", token: m.tokens[name], reentry: 1, expires: time.Now().Add(time.Hour)}
}

var errUnreachable = errors.New("server unreachable")
