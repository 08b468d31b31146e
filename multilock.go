package dlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockhq/dlock/internal/errjoin"
)

// Part is one lock of a MultiLock: a name on a Locker. Parts may mix
// backends (two Redis servers, a table lock and a ZooKeeper lock).
type Part struct {
	Locker Locker
	Name   string
}

// LockAll takes every part, waiting as Lock does, and returns one Lease
// for all of them. Parts are taken in one canonical order, by name and
// then by their Locker's Identity, the same in every process, so two
// callers asking for the same parts in different orders cannot deadlock;
// parts that share a name on Lockers this order cannot tell apart are
// refused before any I/O (give them different names). The same part twice
// is taken once and re-entered. If a part cannot be taken, the parts
// already taken are released and the error says which part failed. ctx
// governs the waits and the rollback's requests.
func LockAll(ctx context.Context, parts ...Part) (*MultiLease, error) {
	return lockAll(ctx, parts, Locker.Lock)
}

// TryLockAll is LockAll without waiting: it fails with ErrNotAcquired as
// soon as one part is held by another owner.
func TryLockAll(ctx context.Context, parts ...Part) (*MultiLease, error) {
	return lockAll(ctx, parts, Locker.TryLock)
}

func lockAll(ctx context.Context, parts []Part, lock func(Locker, context.Context, string) (Lease, error)) (*MultiLease, error) {
	if len(parts) == 0 {
		return nil, errors.New("dlock: MultiLock of no parts")
	}
	for i, p := range parts {
		if p.Locker == nil {
			return nil, fmt.Errorf("dlock: MultiLock part %d has a nil Locker", i)
		}
		if err := ValidateName(p.Name); err != nil {
			return nil, fmt.Errorf("dlock: MultiLock part %d: %w", i, err)
		}
	}
	ordered := slices.Clone(parts)
	key := func(p Part) string { return p.Name + "\x00" + identity(p.Locker) }
	slices.SortStableFunc(ordered, func(a, b Part) int { return strings.Compare(key(a), key(b)) })
	for i := 1; i < len(ordered); i++ {
		if a, b := ordered[i-1], ordered[i]; key(a) == key(b) && !sameLocker(a.Locker, b.Locker) {
			return nil, fmt.Errorf("dlock: MultiLock parts %q on two Lockers of identity %q: no order every process agrees on; give them different names", a.Name, identity(a.Locker))
		}
	}
	m := &MultiLease{done: make(chan struct{})}
	for _, p := range ordered {
		// The parts taken so far ride in ctx, so the same part twice
		// re-enters rather than waits for itself.
		lease, err := lock(p.Locker, m.carry(ctx), p.Name)
		if err != nil {
			rollback := context.WithoutCancel(ctx)
			return nil, errjoin.Join(fmt.Errorf("dlock: MultiLock part %q: %w", p.Name, err), m.unlockAll(rollback))
		}
		m.leases = append(m.leases, lease)
	}
	m.watch()
	return m, nil
}

// sameLocker reports whether a and b are one Locker. Two Lockers that
// cannot be compared (a wrapper passed by value that holds a slice, say)
// are not known to be one, where comparing them would panic.
func sameLocker(a, b Locker) bool {
	return reflect.ValueOf(a).Comparable() && reflect.ValueOf(b).Comparable() && a == b
}

// identity is l's Identity, or its type.
func identity(l Locker) string {
	if id, ok := l.(Identifier); ok {
		return id.Identity()
	}
	return fmt.Sprintf("%T", l)
}

// carry returns ctx with every lease taken so far.
func (m *MultiLease) carry(ctx context.Context) context.Context {
	for _, l := range m.leases {
		ctx = ContextWithLease(ctx, l)
	}
	return ctx
}

// MultiLease holds every part of a MultiLock.
type MultiLease struct {
	leases []Lease
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	err    error
	stop   chan struct{}
	halt   sync.Once
}

var _ Lease = (*MultiLease)(nil)

// watch closes done when any part's lease ends.
func (m *MultiLease) watch() {
	m.stop = make(chan struct{})
	for _, l := range m.leases {
		go func() {
			select {
			case <-l.Done():
				m.end(l.Err())
			case <-m.stop:
			}
		}()
	}
}

func (m *MultiLease) end(err error) {
	m.once.Do(func() {
		m.mu.Lock()
		m.err = err
		m.mu.Unlock()
		close(m.done)
	})
}

// Leases are the parts' leases, in the order they were taken; each has its
// own fencing token.
func (m *MultiLease) Leases() []Lease { return slices.Clone(m.leases) }

// Name is the parts' names joined with "+", in the order taken.
func (m *MultiLease) Name() string {
	names := make([]string, len(m.leases))
	for i, l := range m.leases {
		names[i] = l.Name()
	}
	return strings.Join(names, "+")
}

// Owner is the first part's owner.
func (m *MultiLease) Owner() string { return m.leases[0].Owner() }

// Token is the first part's token; tokens of different names are not
// comparable, so a resource fenced by several parts checks each part's
// token (Leases).
func (m *MultiLease) Token() uint64 { return m.leases[0].Token() }

// Deadline is the earliest of the parts' deadlines.
func (m *MultiLease) Deadline() time.Time {
	var d time.Time
	for _, l := range m.leases {
		if ld := l.Deadline(); d.IsZero() || ld.Before(d) {
			d = ld
		}
	}
	return d
}

// Done is closed when any part's lease ends.
func (m *MultiLease) Done() <-chan struct{} { return m.done }

// Err is nil while every part is held, then the first part's reason.
func (m *MultiLease) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// Refresh refreshes every part.
func (m *MultiLease) Refresh(ctx context.Context) error {
	var errs []error
	for _, l := range m.leases {
		errs = append(errs, l.Refresh(ctx))
	}
	return errjoin.Join(errs...)
}

// Unlock releases every part, in reverse order, and reports every failure.
func (m *MultiLease) Unlock(ctx context.Context) error {
	err := m.unlockAll(ctx)
	m.end(ErrUnlocked)
	m.halt.Do(func() { close(m.stop) })
	return err
}

func (m *MultiLease) unlockAll(ctx context.Context) error {
	var errs []error
	for i := len(m.leases) - 1; i >= 0; i-- {
		errs = append(errs, m.leases[i].Unlock(ctx))
	}
	return errjoin.Join(errs...)
}
