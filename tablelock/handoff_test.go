package tablelock_test

import (
	"database/sql"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Call chains sharing a Locker hand the row on to each other in one
// statement per hold, with increasing tokens; with hand-offs off, each
// hold costs an acquire and a release.
func TestHandOff(t *testing.T) {
	testenv.CheckHandOff(t, sharedLocker, map[string]float64{"postgres": 2, "mysql": 2})
}

// A process whose goroutines pass the lock from one to the next does not
// hand it on while another process waits for it (in dlock_waiters on
// PostgreSQL, by waited_at on MySQL), even with no limit on hand-offs:
// the other process gets the lock.
func TestHandOffLetsAnotherProcessIn(t *testing.T) {
	testenv.CheckHandOffLetsAnotherIn(t, sharedLocker, dlock.WithHandOffs(1<<30))
}

// sharedLocker is newLocker as the shared hand-off checks take it.
func sharedLocker(t testing.TB, db *sql.DB, opts ...dlock.Option) dlock.Locker {
	return newLocker(t, db, opts...)
}

// Call chains that waited for another process's hold hand the row on to
// each other once it comes to them: the marks their own attempts left
// while they waited (waited_at on MySQL) do not count as another process
// waiting.
func TestHandOffAfterWaiting(t *testing.T) {
	testenv.CheckHandOffAfterWaiting(t, sharedLocker)
}
