package tablelock_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/tablelock"
)

// A driver whose connect error spans lines (pgx, when it tried several
// hosts) still gives one-line errors: TryLock's and Inspect's errors are
// one line each.
func TestUnreachableServerErrorsAreOneLine(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://u@127.0.0.1:1,127.0.0.1:2/test?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	probe := db.PingContext(context.Background())
	if probe == nil || !strings.Contains(probe.Error(), "\n") {
		t.Fatalf("pgx's error for two unreachable hosts is not the multi-line one this test needs: %v", probe)
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
