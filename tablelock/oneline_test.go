package tablelock_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/tablelock"
)

// A driver whose connect error spans lines (pgx, when a host name stands
// for several addresses) still gives one-line errors: every Lock, TryLock
// and Inspect error is one line.
func TestUnreachableServerErrorsAreOneLine(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://u@localhost:1/test?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	probe := db.PingContext(context.Background())
	if probe == nil || !strings.Contains(probe.Error(), "\n") {
		t.Skipf("this machine's localhost gives pgx a one-line error: %v", probe)
	}
	l, err := tablelock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, lockErr := l.TryLock(ctx, "x")
	_, _, inspectErr := l.Inspect(ctx, "x")
	for what, err := range map[string]error{"TryLock": lockErr, "Inspect": inspectErr} {
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %q, want one line", what, err)
		}
	}
}
