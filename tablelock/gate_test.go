package tablelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/tablelock"
)

// On PostgreSQL an attempt takes a free name only through a per-name
// gate (a transaction-level advisory lock) that another attempt deciding
// the same name at that moment holds. An attempt the gate turns away was
// reported as "held by another owner", of a fresh name nobody held. Here
// another session holds the gate for as long as the check needs: TryLock
// says the name was free but busy, Lock says so when its ctx ends, and
// nobody holds the name afterwards.
func TestGateTurnsAwayAFreeName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	db := migrated(t, testenv.Postgres)
	l := newLocker(t, db)
	for _, fresh := range []bool{true, false} {
		name := dlocktest.Name(t)
		if !fresh { // a row that is free
			lockUnlock(t, ctx, l, name)
		}
		gate, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gate.ExecContext(ctx, "SELECT pg_advisory_lock("+tablelock.GateClass+", hashtext($1))", name); err != nil {
			t.Fatal(err)
		}
		_, err = l.TryLock(ctx, name)
		if !errors.Is(err, dlock.ErrNotAcquired) || strings.Contains(err.Error(), "another owner") || !strings.Contains(err.Error(), "another attempt") {
			t.Errorf("TryLock of a free name (row: %v) the gate turned away: %v; want ErrNotAcquired saying another attempt was being decided", !fresh, err)
		}
		short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err = l.Lock(short, name)
		stop()
		if !errors.Is(err, dlock.ErrNotAcquired) || strings.Contains(err.Error(), "another owner") || !strings.Contains(err.Error(), "another attempt") {
			t.Errorf("Lock of a free name (row: %v) the gate kept turning away: %v; want ErrNotAcquired saying another attempt was being decided", !fresh, err)
		}
		if _, held, err := l.Inspect(ctx, name); err != nil || held {
			t.Errorf("Inspect after the gate turned the attempts away: held %v, %v; want free", held, err)
		}
		if _, err := gate.ExecContext(ctx, "SELECT pg_advisory_unlock("+tablelock.GateClass+", hashtext($1))", name); err != nil {
			t.Fatal(err)
		}
		gate.Close()
		lockUnlock(t, ctx, l, name) // free, once the gate is
	}
}

// lockUnlock takes name with TryLock and lets it go.
func lockUnlock(t *testing.T, ctx context.Context, l dlock.Locker, name string) {
	t.Helper()
	lease, err := l.TryLock(ctx, name)
	if err != nil {
		t.Fatalf("TryLock(%q): %v", name, err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock(%q): %v", name, err)
	}
}
