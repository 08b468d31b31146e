// Package wakeup is the waiters' side of push-based waiting, shared by
// every backend that can push: a Hub hands each wake-up for a key (a lock
// name, a channel) to that key's waiters without ever blocking, and wakes
// them all when its transport may have missed one (a reconnect). The
// transport (LISTEN on a pinned PostgreSQL connection, Redis
// (S)SUBSCRIBE) stays with its backend; Wait is the loop a waiter runs on
// top.
package wakeup

import (
	"context"
	"sync"
	"time"
)

// Hub is the waiters of a transport, by key, in the order they came. The
// zero Hub is ready to use.
type Hub struct {
	mu      sync.Mutex
	waiters map[string][]chan struct{}
}

// Add registers a waiter for key. Its channel holds at most one pending
// wake-up: a waiter that is busy when several come sees one, and looks
// again. remove unregisters it and reports whether key has no waiter left
// (the transport may then stop listening for key); it may be called more
// than once. A wake-up still pending at remove (the waiter left without
// looking, say its ctx ended) goes to the next waiter, as WakeOne would
// give it, so a wake-up meant for one is not lost with it.
func (h *Hub) Add(key string) (wake <-chan struct{}, remove func() (last bool)) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.waiters == nil {
		h.waiters = map[string][]chan struct{}{}
	}
	h.waiters[key] = append(h.waiters[key], ch)
	h.mu.Unlock()
	var once sync.Once
	return ch, func() (last bool) {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			list := h.waiters[key]
			for i, c := range list {
				if c == ch {
					list = append(list[:i:i], list[i+1:]...)
					break
				}
			}
			if len(list) == 0 {
				delete(h.waiters, key)
				last = true
				return
			}
			h.waiters[key] = list
			select {
			case <-ch:
				h.wakeOne(key)
			default:
			}
		})
		return last
	}
}

// Wake wakes key's waiters.
func (h *Hub) Wake(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.waiters[key] {
		notify(ch)
	}
}

// WakeOne wakes one of key's waiters, the longest waiting of those with no
// wake-up pending, for a transport whose wake-up frees room for one (an
// exclusive lock released): the others would only find it taken. Another
// process's waiters are woken by their own Hub.
func (h *Hub) WakeOne(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wakeOne(key)
}

// wakeOne is WakeOne with h.mu held.
func (h *Hub) wakeOne(key string) {
	for _, ch := range h.waiters[key] {
		if len(ch) == 0 {
			notify(ch)
			return
		}
	}
}

// WakeWaiter wakes the waiter of key whose channel is wake, for a
// wake-up meant for that waiter alone (a grant to it), and reports
// whether it is still registered.
func (h *Hub) WakeWaiter(key string, wake <-chan struct{}) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.waiters[key] {
		if ch == wake {
			notify(ch)
			return true
		}
	}
	return false
}

// WakeAll wakes every waiter: the transport may have missed wake-ups
// (its connection dropped), so each looks again.
func (h *Hub) WakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, list := range h.waiters {
		for _, ch := range list {
			notify(ch)
		}
	}
}

// Waiting reports how many waiters key has.
func (h *Hub) Waiting(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.waiters[key])
}

// Len reports how many waiters there are in all.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, list := range h.waiters {
		n += len(list)
	}
	return n
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Subscribe starts listening for wake-ups of one key and returns once no
// wake-up after it can be missed; cancel stops listening.
type Subscribe func(ctx context.Context) (wake <-chan struct{}, cancel func(), err error)

// Waiter is one waiter's pauses between its attempts: after the first
// miss it subscribes and has the caller try again at once (a wake-up
// between the miss and the subscription would otherwise be lost); then
// each pause lasts until a wake-up, the holder's expiry on the server, or
// Fallback (a push may be lost with its connection), whichever comes
// first. Without a subscription it polls.
type Waiter struct {
	// Subscribe subscribes to the key's wake-ups; nil: the transport
	// cannot push, and the waiter polls.
	Subscribe Subscribe
	// Poll is the pause before retry attempt (counted from 0) when there
	// is no push; nil: Fallback.
	Poll func(attempt int) time.Duration
	// Fallback is the longest pause while subscribed.
	Fallback time.Duration
	// NoPush is told why a subscription failed (never for an ended ctx).
	// It returns the error for Sleep to return, or nil to poll instead.
	NoPush func(err error) error

	wake   <-chan struct{}
	cancel func()
	polls  bool
}

// Sleep pauses before the next attempt; attempt counts the misses so far
// from 0, and retry is the holder's remaining lease by the server's clock
// (0: unknown). It returns ctx's error when ctx ends first.
func (w *Waiter) Sleep(ctx context.Context, attempt int, retry time.Duration) error {
	if w.Subscribe != nil && w.wake == nil && !w.polls {
		wake, cancel, err := w.Subscribe(ctx)
		switch {
		case err == nil:
			w.wake, w.cancel = wake, cancel
			return nil // try again at once
		case ctx.Err() != nil:
			return ctx.Err()
		}
		w.polls = true
		if w.NoPush != nil {
			if err := w.NoPush(err); err != nil {
				return err
			}
		}
	}
	delay := w.Fallback
	if w.wake == nil && w.Poll != nil {
		delay = w.Poll(attempt)
	}
	if retry > 0 && retry+time.Millisecond < delay {
		// Wake when the holder's lease runs out on the server, in case it
		// died without releasing.
		delay = retry + time.Millisecond
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-w.wake:
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Subscribed gives w a subscription made before the attempt that missed:
// Sleep then waits for a wake-up at once, where a subscription of its own
// would have the caller try again first. cancel ends it, as Close does.
func (w *Waiter) Subscribed(wake <-chan struct{}, cancel func()) {
	w.Close()
	w.wake, w.cancel = wake, cancel
}

// Close ends the waiter's subscription, if it has one.
func (w *Waiter) Close() {
	if w.cancel != nil {
		w.cancel()
		w.cancel, w.wake = nil, nil
	}
}

// Wait calls try until it reports done, ctx ends (ctx's error is
// returned), or try fails, pausing between tries as a Waiter on subscribe
// does. A subscription that fails ends the wait with its error.
func Wait(ctx context.Context, subscribe Subscribe, fallback time.Duration, try func() (done bool, retry time.Duration, err error)) error {
	w := Waiter{Subscribe: subscribe, Fallback: fallback, NoPush: func(err error) error { return err }}
	defer w.Close()
	for attempt := 0; ; attempt++ {
		done, retry, err := try()
		if err != nil || done {
			return err
		}
		if err := w.Sleep(ctx, attempt, retry); err != nil {
			return err
		}
	}
}
