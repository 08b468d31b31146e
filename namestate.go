package dlock

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errjoin"
)

// nameState is one name's in-process state in a Client: the hold of the
// name (on a Sharer backend, its holds, one per call chain), their
// leases, and the call chains queued for the name with the turn handed
// out. Its methods are the only code that reads or writes any of it: the
// rest of the engine asks it what to do next and tells it what happened
// on the server.
type nameState struct {
	c    *Client // its settings, backend and telemetry; never its state
	name string

	mu     sync.Mutex
	cur    *hold            // the hold of the name; nil when none (not shared)
	shared map[string]*hold // by owner, on a Sharer backend
	// waiting are the call chains queued for the name, in arrival order;
	// handed is the one whose turn came and that has not taken it yet:
	// nobody else may take the name until it does, or passes the turn on
	// as it leaves.
	waiting []*turn
	handed  *turn
	closed  bool // Close has ended the state's holds
}

// turn is one call chain's place in a nameState's queue.
type turn struct {
	ready chan struct{} // closed when the turn comes
	// owner is the server-side owner id the chain must hold the name as
	// (a sibling's, see chainHold), or "" for a fresh one.
	owner string
	// lease comes with the turn when the last hold was handed straight on
	// to this chain (a hand-off); nil when the chain takes the name on the
	// server itself.
	lease *lease
	// call is the chain's Lock: a hold handed on to it is made with its
	// settings.
	call *lockCall
}

type holdState int

const (
	acquiring holdState = iota // one goroutine is taking the lock on the server
	held                       // leases exist; the watchdog runs
	ending                     // no lease is left; the release is the releaser's
)

// hold is a Client's hold of one name on the server; its leases are the
// re-entries of one call chain. Name, Owner and TTL are fixed when it is
// made, Token and Handle when it is granted (before any lease exists);
// every other field is its nameState's.
type hold struct {
	driver.Hold
	st       *nameState
	payload  string // stored with the hold on the server (WithPayload)
	handOffs int    // hand-offs in a row that led to this hold: 0 for one taken on the server

	state    holdState
	leases   map[*lease]struct{}
	deadline time.Time     // monotonic: the lease is lost unless renewed by then
	gone     chan struct{} // closed when the hold leaves its nameState
	dog      *watchdog     // its renewals, from its grant
	measured holdSpan      // its telemetry from its grant until its end
}

// lease is one Lock or TryLock of a hold.
type lease struct {
	h    *hold
	done chan struct{}
	err  error // guarded by h.st.mu
	// works are the contexts made for work under the lease
	// (LeaseContext), cancelled as it ends, before its hold can be
	// released; guarded by h.st.mu.
	works map[*context.CancelCauseFunc]struct{}
}

// localStep is what a Lock does next, decided by nameState.step: it is
// done (lease, or err, after leaving the queue when leave), takes hold on
// the server, or waits for wait and asks again.
type localStep struct {
	lease *lease
	err   error
	leave bool
	hold  *hold
	wait  <-chan struct{}
}

// step decides the next step of call, as the chain (mine, owner) whose
// place in the queue is *t (nil: none yet; step joins the queue when the
// call must wait).
func (st *nameState) step(call *lockCall, t **turn, mine *hold, owner string) localStep {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return localStep{err: ErrClosed, leave: true}
	}
	if *t != nil && st.handed == *t {
		return st.turnCame(call, *t, owner)
	}
	h := st.cur
	switch {
	case h == nil && st.handed == nil && len(st.waiting) == 0:
		return localStep{hold: st.fresh(call, owner)}
	case h != nil && h == mine && h.state == held:
		return localStep{lease: h.newLease()}
	case !call.wait && st.leaving():
		// An ended hold of this process on its way out (a lost lease's
		// release): nobody holds or waits, so a TryLock waits for it to
		// go rather than say the name is taken here.
		return localStep{wait: h.gone}
	case !call.wait:
		return localStep{err: fmt.Errorf("%w: %q %s", ErrNotAcquired, st.name, byThisProcess)}
	}
	if *t == nil {
		*t = &turn{ready: make(chan struct{}), owner: owner, call: call}
		st.waiting = append(st.waiting, *t)
	}
	return localStep{wait: (*t).ready}
}

// leaving reports whether the name's only hold here has ended and is on
// its way out, with nobody waiting. st.mu is held.
func (st *nameState) leaving() bool {
	return st.cur != nil && st.cur.state == ending && st.handed == nil && len(st.waiting) == 0
}

// byThisProcess is why a TryLock found a name taken in the process.
const byThisProcess = "is held, or waited for, by another call chain of this process"

// turnCame is the step of call, whose turn, t, has come. st.mu is held.
func (st *nameState) turnCame(call *lockCall, t *turn, owner string) localStep {
	switch {
	case t.lease != nil && t.lease.err == nil:
		// The last hold was handed straight on to this chain.
		l := t.lease
		t.lease, st.handed = nil, nil
		return localStep{lease: l}
	case st.cur != nil:
		// The turn came with a hold that ended before this chain took
		// it: keep the turn until the hold is gone.
		t.lease = nil
		return localStep{wait: st.cur.gone}
	}
	st.handed = nil
	return localStep{hold: st.fresh(call, owner)}
}

// fresh makes the hold a chain takes on the server for call, as owner
// ("" for a new owner id). st.mu is held.
func (st *nameState) fresh(call *lockCall, owner string) *hold {
	if owner == "" {
		owner = st.c.newOwner()
	}
	h := st.newHold(call, owner)
	st.cur = h
	return h
}

func (st *nameState) newHold(call *lockCall, owner string) *hold {
	return &hold{
		Hold:    driver.Hold{Name: st.name, Owner: owner, TTL: call.ttl},
		st:      st,
		payload: call.payload,
		state:   acquiring,
		gone:    make(chan struct{}),
	}
}

// sharedStep is step on a backend whose holds of one name coexist: the
// chain re-enters its own hold, or takes one of its own on the server.
func (st *nameState) sharedStep(call *lockCall, mine *hold, owner string) localStep {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed {
		return localStep{err: ErrClosed}
	}
	if mine != nil && st.shared[mine.Owner] == mine && mine.state == held {
		return localStep{lease: mine.newLease()}
	}
	if owner == "" {
		owner = st.c.newOwner()
	}
	h := st.newHold(call, owner)
	if st.shared == nil {
		st.shared = map[string]*hold{}
	}
	st.shared[owner] = h
	return localStep{hold: h}
}

// leave takes t (nil: none) out of the queue. A turn handed to it and
// not taken passes to the next in line; a lease handed with it is
// returned, for the caller to give back (which hands the lock on again).
func (st *nameState) leave(t *turn) (handedOn *lease) {
	if t == nil {
		return nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.handed != t {
		if i := slices.Index(st.waiting, t); i >= 0 {
			st.waiting = slices.Delete(st.waiting, i, i+1)
		}
		return nil
	}
	st.handed = nil
	if l := t.lease; l != nil && l.err == nil {
		handedOn = l
	} else if st.cur == nil {
		st.handTurn()
	}
	t.lease = nil
	return handedOn
}

// handTurn gives the name to the first chain in the queue, if any. st.mu
// is held.
func (st *nameState) handTurn() {
	if len(st.waiting) == 0 {
		return
	}
	st.handed = st.waiting[0]
	st.waiting = slices.Delete(st.waiting, 0, 1)
	close(st.handed.ready)
}

// idle reports whether the state holds nothing: no hold, nobody queued.
func (st *nameState) idle() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.cur == nil && len(st.shared) == 0 && st.handed == nil && len(st.waiting) == 0
}

// live reports whether h is held (its leases may be re-entered).
func (st *nameState) live(h *hold) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return h.state == held
}

// granted makes h held after the server granted it g, its lease counted
// from sent, and returns its first lease and the term it was granted for.
// It returns nil when Close ended the state meanwhile: h is then ending,
// for the caller to give back.
func (st *nameState) granted(h *hold, g driver.Grant, sent time.Time) (*lease, time.Duration) {
	measured := st.c.tel.holdStarts(h.Name, g.Token) // outside st.mu (see measuredEnd)
	st.mu.Lock()
	h.Token, h.Handle = g.Token, g.Handle
	term := termOf(h, g)
	if st.closed {
		h.state = ending
		st.mu.Unlock()
		st.c.tel.holdEnds(h.Name, &measured, "closed")
		return nil, term
	}
	h.state = held
	h.measured = measured
	h.deadline = sent.Add(term - leaseMargin(term))
	h.leases = make(map[*lease]struct{})
	h.dog = newWatchdog(h)
	l := h.newLease()
	st.mu.Unlock()
	return l, term
}

// newLease adds a lease to h. st.mu is held.
func (h *hold) newLease() *lease {
	l := &lease{h: h, done: make(chan struct{})}
	h.leases[l] = struct{}{}
	return l
}

// endLease ends l with err. st.mu is held.
func (h *hold) endLease(l *lease, err error) {
	if l.err != nil {
		return
	}
	l.err = errjoin.OneLine(err)
	delete(h.leases, l)
	close(l.done)
	for cancel := range l.works {
		(*cancel)(l.err)
	}
	l.works = nil
}

// cancelsWith has cancel called with l's Err as l ends (at once if it
// has), and returns what undoes that.
func (st *nameState) cancelsWith(l *lease, cancel context.CancelCauseFunc) (stop func()) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if l.err != nil {
		cancel(l.err)
		return func() {}
	}
	if l.works == nil {
		l.works = map[*context.CancelCauseFunc]struct{}{}
	}
	key := &cancel
	l.works[key] = struct{}{}
	return func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		delete(l.works, key)
	}
}

// end makes h, whose leases have all ended, ending, stops its watchdog,
// and returns its measurement for holdEnds. st.mu is held.
func (h *hold) end() holdSpan {
	h.state = ending
	h.dog.stop()
	return measuredEnd(h)
}

// unlock ends l. It returns h when l was the last lease of its hold,
// which the caller then releases, and an error wrapping ErrNotHeld when
// l had ended already.
func (st *nameState) unlock(l *lease) (last *hold, err error) {
	st.mu.Lock()
	h := l.h
	if l.err != nil {
		err := l.err
		st.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	h.endLease(l, ErrUnlocked)
	if len(h.leases) > 0 || h.state != held {
		st.mu.Unlock()
		return nil, nil
	}
	measured := h.end()
	st.mu.Unlock()
	st.c.tel.holdEnds(h.Name, &measured, "released")
	return h, nil
}

// lose ends h because it was lost (cause): its leases' Done close at
// once and their Err wrap ErrLost and cause. It reports whether h was
// held until now (the caller then releases it).
func (st *nameState) lose(h *hold, cause error) bool {
	err := fmt.Errorf("%w: %q: %w", ErrLost, h.Name, cause)
	st.mu.Lock()
	if h.state != held {
		st.mu.Unlock()
		return false
	}
	for l := range h.leases {
		h.endLease(l, err)
	}
	measured := h.end()
	st.mu.Unlock()
	st.c.tel.holdEnds(h.Name, &measured, "lost")
	return true
}

// close ends every hold of the state that is held (their leases' Err is
// ErrClosed) and makes every later step fail with ErrClosed. It returns
// the holds ended, for the caller to release.
func (st *nameState) close() []*hold {
	st.mu.Lock()
	st.closed = true
	var ended []*hold
	var measured []holdSpan
	for _, h := range st.holdsLocked() {
		if h.state != held {
			continue
		}
		for l := range h.leases {
			h.endLease(l, ErrClosed)
		}
		measured = append(measured, h.end())
		ended = append(ended, h)
	}
	st.mu.Unlock()
	for i, h := range ended {
		st.c.tel.holdEnds(h.Name, &measured[i], "closed")
	}
	return ended
}

// holdsLocked is every hold of the state. st.mu is held.
func (st *nameState) holdsLocked() []*hold {
	var hs []*hold
	if st.cur != nil {
		hs = append(hs, st.cur)
	}
	for _, h := range st.shared {
		hs = append(hs, h)
	}
	return hs
}

// settle forgets h, whose server-side hold has been released, given up
// or never granted: the next chain in line gets its turn.
func (st *nameState) settle(h *hold) {
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case st.cur == h:
		st.cur = nil
		if st.handed == nil {
			st.handTurn()
		}
	case st.shared[h.Owner] == h:
		delete(st.shared, h.Owner)
	}
	select {
	case <-h.gone:
	default:
		close(h.gone)
	}
}

// deadline is h's client-side deadline.
func (st *nameState) deadline(h *hold) time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	return h.deadline
}

// extend moves h's deadline to d, when h is held and d is later.
func (st *nameState) extend(h *hold, d time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if h.state == held && d.After(h.deadline) {
		h.deadline = d
	}
}

// leaseDeadline is l's deadline, or the zero time once it has ended.
func (st *nameState) leaseDeadline(l *lease) time.Time {
	st.mu.Lock()
	defer st.mu.Unlock()
	if l.err != nil {
		return time.Time{}
	}
	return l.h.deadline
}

// leaseErr is l's Err.
func (st *nameState) leaseErr(l *lease) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	return l.err
}

// handsOn reports whether h, whose last lease has ended, would pass to
// the first chain in line (see nextInLine), without changing anything.
func (st *nameState) handsOn(h *hold) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.handsOnLocked(h)
}

func (st *nameState) handsOnLocked(h *hold) bool {
	c := st.c
	if _, ok := c.backend.(driver.Transferer); !ok || c.cfg.HandOffs == 0 || c.shared {
		return false
	}
	if st.closed || st.cur != h || st.handed != nil || len(st.waiting) == 0 || st.waiting[0].owner != "" {
		return false
	}
	// After HandOffs in a row, through the server: other processes'
	// waiters may have waited through every hold handed on so far.
	return h.handOffs < c.cfg.HandOffs
}

// nextInLine is the hold h, whose last lease has ended, is to be handed
// on to, with the call it is made for, or nil when h is not to be handed
// on. The new hold takes h's place at once, so no other chain of the
// Client sees the name free meanwhile; h leaves the state.
func (st *nameState) nextInLine(h *hold) (next *hold, call *lockCall) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.handsOnLocked(h) {
		return nil, nil
	}
	call = st.waiting[0].call
	next = st.newHold(call, st.c.newOwner())
	next.handOffs = h.handOffs + 1
	st.cur = next
	close(h.gone)
	return next, call
}

// handTo gives l, the first lease of a hold handed on for call, to the
// first chain in line, if that is still the chain it was made for. It
// reports whether it did; when it did not, the caller gives l back.
func (st *nameState) handTo(call *lockCall, l *lease) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.handed != nil || len(st.waiting) == 0 {
		return false
	}
	t := st.waiting[0]
	if t.owner != "" || !t.call.sameHold(call) {
		return false
	}
	st.waiting = st.waiting[1:]
	st.handed, t.lease = t, l
	close(t.ready)
	return true
}

// waitingCount is how many chains wait in the queue (for tests).
func (st *nameState) waitingCount() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.waiting)
}

// hasHold reports whether the state has a hold (for tests).
func (st *nameState) hasHold() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.cur != nil || len(st.shared) > 0
}
