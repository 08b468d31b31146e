package advisory_test

import (
	"database/sql"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Call chains sharing a Locker hand the session's lock on to each other
// in one statement per hold, with increasing tokens; with hand-offs off a
// hold costs an acquire and a release.
func TestHandOff(t *testing.T) {
	testenv.CheckHandOff(t, sharedLocker, map[string]float64{"postgres": 2, "mysql": 2})
}

// A process whose goroutines pass the lock from one to the next lets
// another process in at the hand-off limit: the server grants the lock to
// the first in its own queue.
func TestHandOffLetsAnotherProcessIn(t *testing.T) {
	testenv.CheckHandOffLetsAnotherIn(t, sharedLocker)
}

// sharedLocker is newLocker as the shared hand-off checks take it.
func sharedLocker(t testing.TB, db *sql.DB, opts ...dlock.Option) dlock.Locker {
	return newLocker(t, db, opts...)
}

// Call chains that waited for another process's hold hand the lock on to
// each other once it comes to them.
func TestHandOffAfterWaiting(t *testing.T) {
	testenv.CheckHandOffAfterWaiting(t, sharedLocker)
}
