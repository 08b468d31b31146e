package wakeup

import "sync"

// Shared keeps one transport per key (a *sql.DB, a Redis client), shared
// by every user of that key and counted: the last user's Release tells
// its caller to close it. The zero Shared is ready to use.
type Shared[K comparable, T any] struct {
	mu sync.Mutex
	m  map[K]*shared[T]
}

type shared[T any] struct {
	t    T
	refs int
}

// Get returns key's transport, made with open if it has none, and counts
// one more user.
func (s *Shared[K, T]) Get(key K, open func() T) T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[K]*shared[T]{}
	}
	e := s.m[key]
	if e == nil {
		e = &shared[T]{t: open()}
		s.m[key] = e
	}
	e.refs++
	return e.t
}

// Peek returns key's transport while it has a user, without counting
// one more.
func (s *Shared[K, T]) Peek(key K) (t T, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.m[key]; e != nil {
		return e.t, true
	}
	return t, false
}

// Release counts one user of key less and reports whether it was the
// last: key's transport is then forgotten, and the caller closes it.
func (s *Shared[K, T]) Release(key K) (last bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[key]
	if e == nil {
		return false
	}
	if e.refs--; e.refs > 0 {
		return false
	}
	delete(s.m, key)
	return true
}
