package pessimistic

import (
	"database/sql/driver"
	"strings"
)

var errBadConn = driver.ErrBadConn

// Strength is how strongly a locking read locks its rows.
type Strength int

// The lock strengths.
const (
	// Update locks rows against every other locking read and write
	// (FOR UPDATE).
	Update Strength = iota
	// NoKeyUpdate is FOR NO KEY UPDATE (PostgreSQL): like Update, but
	// does not block FOR KEY SHARE, so inserts referencing the row by
	// foreign key go on. MySQL has none; SQL renders FOR UPDATE there.
	NoKeyUpdate
	// Share is FOR SHARE: other readers may lock too, writers wait.
	Share
)

// Wait is what a locking read does when a row is already locked.
type Wait int

// The wait policies.
const (
	// Block waits for the lock, up to the lock wait timeout.
	Block Wait = iota
	// NoWait fails at once; the error satisfies IsLockNotAvailable.
	NoWait
	// SkipLocked leaves locked rows out of the result (queue consumers).
	SkipLocked
)

// Clause is a row-locking clause for the end of a SELECT.
type Clause struct {
	Strength Strength
	Wait     Wait
}

// Common clauses.
var (
	ForUpdate           = Clause{Update, Block}
	ForUpdateNoWait     = Clause{Update, NoWait}
	ForUpdateSkipLocked = Clause{Update, SkipLocked}
	ForNoKeyUpdate      = Clause{NoKeyUpdate, Block}
	ForShare            = Clause{Share, Block}
)

// Postgres renders the clause for PostgreSQL.
func (c Clause) Postgres() string { return c.render(true) }

// MySQL renders the clause for MySQL 8 / MariaDB 10.6+ (NoKeyUpdate becomes
// FOR UPDATE, the nearest MySQL has).
func (c Clause) MySQL() string { return c.render(false) }

func (c Clause) render(postgres bool) string {
	var b strings.Builder
	switch {
	case c.Strength == Share:
		b.WriteString("FOR SHARE")
	case c.Strength == NoKeyUpdate && postgres:
		b.WriteString("FOR NO KEY UPDATE")
	default:
		b.WriteString("FOR UPDATE")
	}
	switch c.Wait {
	case NoWait:
		b.WriteString(" NOWAIT")
	case SkipLocked:
		b.WriteString(" SKIP LOCKED")
	}
	return b.String()
}
