package tablelock

import (
	"context"
	"database/sql"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// Grant is a grant's notification, parsed (see grantNote).
type Grant struct {
	PID            uint32
	Attempt, Token uint64
	Term           time.Duration
	Owner, Name    string
}

// ParseGrant parses a grant's notification (see parseGrant).
func ParseGrant(payload string) (Grant, bool) {
	g, ok := parseGrant(payload)
	return Grant{PID: g.pid, Attempt: g.attempt, Token: g.token, Term: g.term, Owner: g.owner, Name: g.name}, ok
}

// BoundsCalls is what l's backend tells dlock about its calls' deadlines
// (driver.DeadlineBound).
func BoundsCalls(l *Locker) bool { return l.b.BoundsCalls() }

// Attempt is one acquire attempt of l's backend for name as owner, as
// dlock.Client makes them: a retried attempt of one hold carries the same
// owner.
func Attempt(ctx context.Context, l *Locker, name, owner string) (bool, uint64, error) {
	g, err := l.b.Acquire(ctx, driver.Request{Name: name, Owner: owner, TTL: time.Minute, Wait: true})
	return g.Acquired, g.Token, err
}

// ReleaseHold releases owner's hold of name, whatever its token.
func ReleaseHold(ctx context.Context, l *Locker, name, owner string) error {
	return l.b.Release(ctx, driver.Hold{Name: name, Owner: owner, TTL: time.Minute})
}

// InRoom is how many of this process's waiters wait for name on db (see
// room), and whether db has a room open.
func InRoom(db *sql.DB, name string) (int, bool) { return inRoom(db, name) }

// SetPruneInterval lets l's background prune run as often as every d.
func SetPruneInterval(l *Locker, d time.Duration) { l.b.pruner.setInterval(d) }

// GateClass is the first key of the PostgreSQL acquire gate's advisory
// lock; the second is hashtext(name).
const GateClass = gateClass
