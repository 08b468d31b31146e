package tablelock

import "time"

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
