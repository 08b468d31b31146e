package tablelock

import (
	"database/sql"
	"slices"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/wakeup"
)

// MySQL has nothing to push a release with, so its waiters poll. A room
// keeps that to one poll per process: the waiters of every Locker on one
// *sql.DB wait for a name in one queue (a wakeup.Hub), and one timer per
// name wakes the longest waiting of them to make the attempt, paced by
// that waiter's Locker's Backoff (at most one poll a millisecond). A
// release by any Locker on the *sql.DB wakes that waiter at once. A
// release by another process is found by the next poll.
//
// A waiter still tries on its own after dlock.Config.PushFallback, as it
// does when a push can be lost: waiters behind the first each make an
// attempt per PushFallback, where they used to make one per backoff step.
//
// A room is open while anyone waits in it: each waiter is one of its
// users (wakeup.Shared).
var rooms wakeup.Shared[*sql.DB, *room]

// minPoll is the shortest pause between two polls of a room, whatever a
// Backoff says: a poll that came sooner would wake the next waiter while
// the first is still making its attempt.
const minPoll = time.Millisecond

// room is the waiters of one *sql.DB, by name. Lock order: mu, then the
// Hub's own lock.
type room struct {
	hub wakeup.Hub

	mu    sync.Mutex
	polls map[string]*roomPoll
}

// roomPoll is a name's poll timer and the backoffs of its waiters, the
// longest waiting first. A timer whose poll is stopped does nothing more
// when it fires.
type roomPoll struct {
	t        *time.Timer
	attempt  int
	backoffs []*dlock.Backoff // one per waiter, told apart by address
	stopped  bool
}

// next is the pause before the next poll.
func (p *roomPoll) next() time.Duration {
	return max(minPoll, (*p.backoffs[0])(p.attempt))
}

// subscribe adds r's waiter, whose Locker polls at backoff, to db's room
// for r.Name, and starts the name's poll when no one waits for it in
// this process; cancel takes the waiter out, and stops the poll with the
// last one.
func subscribe(db *sql.DB, r driver.Request, backoff dlock.Backoff) (wake <-chan struct{}, cancel func()) {
	rm := rooms.Get(db, func() *room { return &room{polls: map[string]*roomPoll{}} })
	rm.mu.Lock()
	defer rm.mu.Unlock()
	mine := &backoff
	p := rm.polls[r.Name]
	if p == nil {
		p = &roomPoll{backoffs: []*dlock.Backoff{mine}}
		p.t = time.AfterFunc(p.next(), func() { rm.poll(r.Name, p) })
		rm.polls[r.Name] = p
	} else {
		p.backoffs = append(p.backoffs, mine)
	}
	wake, remove := rm.hub.Add(r.Name)
	var once sync.Once
	return wake, func() {
		once.Do(func() {
			rm.leave(r.Name, p, mine, remove)
			rooms.Release(db)
		})
	}
}

// leave takes the waiter whose backoff is mine out of name's poll p.
func (rm *room) leave(name string, p *roomPoll, mine *dlock.Backoff, remove func() bool) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	remove()
	wasFirst := p.backoffs[0] == mine
	p.backoffs = slices.DeleteFunc(p.backoffs, func(b *dlock.Backoff) bool { return b == mine })
	if len(p.backoffs) > 0 {
		if wasFirst { // the next poll is the new first waiter's
			p.t.Reset(p.next())
		}
		return
	}
	p.stopped = true
	p.t.Stop()
	delete(rm.polls, name)
}

// poll wakes name's longest waiting waiter for an attempt, and sets the
// timer for the next poll.
func (rm *room) poll(name string, p *roomPoll) {
	rm.mu.Lock()
	if p.stopped {
		rm.mu.Unlock()
		return
	}
	p.attempt++
	p.t.Reset(p.next())
	rm.mu.Unlock()
	rm.hub.WakeOne(name)
}

// released wakes the longest waiting waiter for name on db, if this
// process has one: a hold of name on db has just ended.
func released(db *sql.DB, name string) {
	if rm, ok := rooms.Peek(db); ok {
		rm.hub.WakeOne(name)
	}
}

// inRoom is how many waiters wait for name on db in this process, and
// whether db has a room open at all.
func inRoom(db *sql.DB, name string) (waiters int, open bool) {
	rm, ok := rooms.Peek(db)
	if !ok {
		return 0, false
	}
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if p := rm.polls[name]; p != nil {
		waiters = len(p.backoffs)
	}
	return waiters, true
}
