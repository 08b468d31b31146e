package wakeup_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/internal/wakeup"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func woken(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestHub(t *testing.T) {
	var h wakeup.Hub
	a, removeA := h.Add("x")
	b, removeB := h.Add("x")
	c, removeC := h.Add("y")
	h.Wake("x")
	h.Wake("x") // never blocks: one pending wake-up per waiter
	if !woken(a) || !woken(b) || woken(c) {
		t.Fatal("Wake(x) must wake x's waiters and only them")
	}
	if woken(a) {
		t.Fatal("two wake-ups left two pending: a waiter holds at most one")
	}
	h.WakeAll()
	if !woken(a) || !woken(b) || !woken(c) {
		t.Fatal("WakeAll must wake every waiter")
	}
	if h.Waiting("x") != 2 || h.Len() != 3 {
		t.Fatalf("Waiting(x) = %d, Len = %d; want 2 and 3", h.Waiting("x"), h.Len())
	}
	if removeA() {
		t.Fatal("removing one of two waiters reported the key empty")
	}
	if !removeB() || removeB() {
		t.Fatal("removing the last waiter must report it once")
	}
	removeC()
	if h.Len() != 0 {
		t.Fatalf("%d waiters left", h.Len())
	}
}

// A wake-up between the first miss and the subscription is not lost: Wait
// tries again once subscribed.
func TestWaitTriesAgainAfterSubscribing(t *testing.T) {
	var h wakeup.Hub
	tries := 0
	subscribe := func(context.Context) (<-chan struct{}, func(), error) {
		w, remove := h.Add("k")
		return w, func() { remove() }, nil
	}
	err := wakeup.Wait(context.Background(), subscribe, time.Hour, func() (bool, time.Duration, error) {
		tries++
		return tries == 2, 0, nil
	})
	if err != nil || tries != 2 {
		t.Fatalf("Wait = %v after %d tries, want success at the try right after subscribing", err, tries)
	}
	if h.Len() != 0 {
		t.Fatal("Wait left its subscription")
	}
}

func TestWaitEndsWithCtx(t *testing.T) {
	var h wakeup.Hub
	subscribe := func(context.Context) (<-chan struct{}, func(), error) {
		w, remove := h.Add("k")
		return w, func() { remove() }, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	tries := make(chan struct{}, 16)
	go func() {
		done <- wakeup.Wait(ctx, subscribe, time.Hour, func() (bool, time.Duration, error) {
			tries <- struct{}{}
			return false, 0, nil
		})
	}()
	<-tries
	<-tries // subscribed
	h.Wake("k")
	<-tries // woken: tried again
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
}

func TestShared(t *testing.T) {
	var s wakeup.Shared[string, *int]
	opened := 0
	open := func() *int { opened++; n := opened; return &n }
	a, b := s.Get("db", open), s.Get("db", open)
	if a != b || opened != 1 {
		t.Fatalf("two users of one key got %p and %p after %d opens, want one transport", a, b, opened)
	}
	if s.Release("db") {
		t.Fatal("the first of two users was told it was the last")
	}
	if p, ok := s.Peek("db"); !ok || p != a {
		t.Fatalf("Peek with a user left: %p, %v, want %p", p, ok, a)
	}
	if !s.Release("db") {
		t.Fatal("the last user was not told")
	}
	if _, ok := s.Peek("db"); ok {
		t.Fatal("Peek found a transport whose last user left")
	}
	if c := s.Get("db", open); c == a || opened != 2 {
		t.Fatal("a key whose last user left must get a new transport")
	}
}

// A waiter whose subscription fails is told once and polls instead.
func TestWaiterPollsWithoutPush(t *testing.T) {
	subscribes, told := 0, 0
	w := wakeup.Waiter{
		Subscribe: func(context.Context) (<-chan struct{}, func(), error) {
			subscribes++
			return nil, nil, errors.ErrUnsupported
		},
		Poll:     func(int) time.Duration { return time.Millisecond },
		Fallback: time.Hour,
		NoPush:   func(error) error { told++; return nil },
	}
	defer w.Close()
	for attempt := range 3 {
		if err := w.Sleep(context.Background(), attempt, 0); err != nil {
			t.Fatal(err)
		}
	}
	if subscribes != 1 || told != 1 {
		t.Fatalf("subscribed %d times, told %d times; want once each", subscribes, told)
	}
}

// WakeOne wakes the longest-waiting waiter with nothing pending, and a
// wake-up pending when its waiter leaves passes to the next one.
func TestWakeOne(t *testing.T) {
	var h wakeup.Hub
	a, removeA := h.Add("x")
	b, removeB := h.Add("x")
	c, removeC := h.Add("x")
	defer removeC()
	h.WakeOne("x")
	if !woken(a) || woken(b) || woken(c) {
		t.Fatal("WakeOne must wake the first waiter only")
	}
	h.WakeOne("x")
	h.WakeOne("x") // a has one pending: the next goes to b
	if !woken(a) || !woken(b) || woken(c) {
		t.Fatal("WakeOne must pass over a waiter with a wake-up pending")
	}
	h.WakeOne("x")
	removeA() // leaves with its wake-up unread: b, the next, gets it
	if !woken(b) || woken(c) {
		t.Fatal("a wake-up pending at remove must go to the next waiter")
	}
	removeB() // nothing pending: nobody is woken
	if woken(c) {
		t.Fatal("remove with nothing pending woke a waiter")
	}
	if h.Waiting("x") != 1 {
		t.Fatalf("Waiting(x) = %d, want 1", h.Waiting("x"))
	}
}

// A Waiter given a subscription made before the miss waits on it at once:
// it does not subscribe, and it sleeps until the wake-up; Close ends the
// given subscription.
func TestWaiterSubscribed(t *testing.T) {
	var h wakeup.Hub
	wake, remove := h.Add("x")
	cancelled := false
	w := wakeup.Waiter{
		Subscribe: func(context.Context) (<-chan struct{}, func(), error) {
			t.Error("subscribed again")
			return nil, nil, errors.ErrUnsupported
		},
		Fallback: time.Hour,
	}
	w.Subscribed(wake, func() { cancelled = remove() })
	// Bounded: a Waiter that ignored the subscription would sleep its
	// hour-long Fallback, and fail here instead of at the test's timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	slept := make(chan error, 1)
	go func() { slept <- w.Sleep(ctx, 0, 0) }()
	select {
	case err := <-slept:
		t.Fatalf("Sleep returned (%v) before the wake-up", err)
	case <-time.After(50 * time.Millisecond):
	}
	h.Wake("x")
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	w.Close()
	if !cancelled || h.Len() != 0 {
		t.Fatalf("Close: cancelled %v, %d waiters left; want the subscription ended", cancelled, h.Len())
	}
}
