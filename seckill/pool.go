package seckill

import (
	"context"
	"errors"
	"sync"

	"github.com/dlockhq/dlock"
)

// Pool is a dlock.Locker for many concurrent buyers in one process. A
// Locker is one owner, so buyers sharing one would re-enter each other's
// locks; a Pool lends every Lock a Locker of its own (a separate owner)
// until its lease is unlocked.
type Pool struct {
	mk   func() (dlock.Locker, error)
	mu   sync.Mutex
	free []dlock.Locker
	all  []dlock.Locker
}

var _ dlock.Locker = (*Pool)(nil)

// NewPool returns a Pool that makes Lockers with mk as needed.
func NewPool(mk func() (dlock.Locker, error)) (*Pool, error) {
	if mk == nil {
		return nil, errors.New("seckill: nil Locker constructor")
	}
	return &Pool{mk: mk}, nil
}

func (p *Pool) get() (dlock.Locker, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 {
		l := p.free[n-1]
		p.free = p.free[:n-1]
		return l, nil
	}
	l, err := p.mk()
	if err != nil {
		return nil, err
	}
	p.all = append(p.all, l)
	return l, nil
}

func (p *Pool) put(l dlock.Locker) {
	p.mu.Lock()
	p.free = append(p.free, l)
	p.mu.Unlock()
}

// Lock implements dlock.Locker with a Locker of the call's own.
func (p *Pool) Lock(ctx context.Context, name string) (dlock.Lease, error) {
	return p.lock(ctx, name, dlock.Locker.Lock)
}

// TryLock implements dlock.Locker with a Locker of the call's own.
func (p *Pool) TryLock(ctx context.Context, name string) (dlock.Lease, error) {
	return p.lock(ctx, name, dlock.Locker.TryLock)
}

func (p *Pool) lock(ctx context.Context, name string, f func(dlock.Locker, context.Context, string) (dlock.Lease, error)) (dlock.Lease, error) {
	l, err := p.get()
	if err != nil {
		return nil, err
	}
	lease, err := f(l, ctx, name)
	if err != nil {
		p.put(l)
		return nil, err
	}
	return &pooledLease{Lease: lease, back: func() { p.put(l) }}, nil
}

type pooledLease struct {
	dlock.Lease
	once sync.Once
	back func()
}

func (l *pooledLease) Unlock(ctx context.Context) error {
	err := l.Lease.Unlock(ctx)
	l.once.Do(l.back)
	return err
}

// Close closes every Locker the Pool made that has a Close(ctx) method.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, l := range p.all {
		if c, ok := l.(interface{ Close(context.Context) error }); ok {
			errs = append(errs, c.Close(ctx))
		}
	}
	return errors.Join(errs...)
}
