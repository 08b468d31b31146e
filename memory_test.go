package dlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/driver"
)

// memory is an in-process Backend for testing the policy in Client: it
// keeps expiries on its own clock and can be told to fail, as a server
// that became unreachable would.
type memory struct {
	mu       sync.Mutex
	locks    map[string]*memLock
	tokens   map[string]uint64
	failNext error // every call fails with it while set
	closed   bool  // as a client its owner closed: every call fails
	// hang, while not nil, blocks every call until it is closed, whatever
	// the call's ctx says: a driver that ignores ctx on a frozen server.
	hang     chan struct{}
	refreshN int
	// sessions makes holds end only by release, as a ZooKeeper node or
	// an advisory lock of a live session (see driver.SessionBound).
	sessions bool
	refused  int // attempts refused because another owner held the name
}

// waitRefused waits until an attempt has been refused: a Lock is waiting.
func (m *memory) waitRefused(t *testing.T) {
	t.Helper()
	dlocktest.Eventually(t, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.refused > 0
	}, "an attempt refused")
}

type memLock struct {
	owner   string
	payload string
	token   uint64
	reentry int
	expires time.Time
}

// KeepsPayload implements driver.PayloadKeeper.
func (m *memory) KeepsPayload() bool { return true }

func newMemory() *memory {
	return &memory{locks: map[string]*memLock{}, tokens: map[string]uint64{}}
}

func (m *memory) fail(err error) {
	m.mu.Lock()
	m.failNext = err
	m.mu.Unlock()
}

// close makes every later call fail as on a closed client.
func (m *memory) close() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}

var errClientClosed = errors.New("memory: client is closed")

// freeze makes every call hang until thaw.
func (m *memory) freeze() {
	m.mu.Lock()
	m.hang = make(chan struct{})
	m.mu.Unlock()
}

func (m *memory) thaw() {
	m.mu.Lock()
	close(m.hang)
	m.hang = nil
	m.mu.Unlock()
}

// wait blocks while the server is frozen.
func (m *memory) wait() {
	m.mu.Lock()
	hang := m.hang
	m.mu.Unlock()
	if hang != nil {
		<-hang
	}
}

// expiry is when name's hold expires on the server.
func (m *memory) expiry(name string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if l := m.locks[name]; l != nil {
		return l.expires
	}
	return time.Time{}
}

func (m *memory) Acquire(_ context.Context, r driver.Request) (driver.Grant, error) {
	m.wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return driver.Grant{}, errClientClosed
	}
	if m.failNext != nil {
		return driver.Grant{}, m.failNext
	}
	now := time.Now()
	l := m.locks[r.Name]
	switch {
	case l == nil || !now.Before(l.expires) && !m.sessions:
		m.tokens[r.Name]++
		m.locks[r.Name] = &memLock{owner: r.Owner, payload: r.Payload, token: m.tokens[r.Name], reentry: 1, expires: now.Add(r.TTL)}
		return driver.Grant{Acquired: true, Token: m.tokens[r.Name]}, nil
	case l.owner == r.Owner:
		l.reentry++
		l.expires = now.Add(r.TTL)
		return driver.Grant{Acquired: true, Token: l.token}, nil
	}
	m.refused++
	return driver.Grant{RetryAfter: time.Until(l.expires)}, nil
}

func (m *memory) held(h driver.Hold) (*memLock, error) {
	if m.failNext != nil {
		return nil, m.failNext
	}
	l := m.locks[h.Name]
	if l == nil || l.owner != h.Owner || (h.Token != 0 && l.token != h.Token) || !time.Now().Before(l.expires) && !m.sessions {
		return nil, dlock.ErrNotHeld
	}
	return l, nil
}

func (m *memory) Refresh(_ context.Context, h driver.Hold) error {
	m.wait()
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

func (m *memory) Release(_ context.Context, h driver.Hold) error {
	m.wait()
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
	if l == nil || !time.Now().Before(l.expires) && !m.sessions {
		return dlock.Holder{}, false, nil
	}
	return dlock.Holder{Owner: l.owner, Token: l.token, TTL: time.Until(l.expires), Payload: l.payload}, true, nil
}

// sessionMemory is memory whose holds end with their session.
type sessionMemory struct{ *memory }

func (sessionMemory) HoldsEndWithSession() bool { return true }

// stolen makes name look taken over by another owner on the server.
func (m *memory) stolen(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tokens[name]++
	m.locks[name] = &memLock{owner: "thief", token: m.tokens[name], reentry: 1, expires: time.Now().Add(time.Hour)}
}

var errUnreachable = errors.New("server unreachable")
