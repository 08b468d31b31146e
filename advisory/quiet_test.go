package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// driverLog is what go-sql-driver/mysql logs (to stderr, by default).
type driverLog struct{ testenv.Buffer }

func (l *driverLog) Print(v ...any) { _, _ = fmt.Fprintln(&l.Buffer, v...) }

// A wait that its ctx ends held nothing: it logs no warning about a
// release, its error is one line with no driver's words, and the driver
// logs nothing about the connection dlock stopped.
func TestCancelledWaitIsQuiet(t *testing.T) {
	var drv driverLog
	if err := mysql.SetLogger(&drv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mysql.SetLogger(log.New(os.Stderr, "[mysql] ", log.Ldate|log.Ltime|log.Lshortfile)) })
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			db := migrated(t, d.Open)
			var logs testenv.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			holder, waiter := newLocker(t, db), newLocker(t, db, dlock.WithLogger(logger))
			name := dlocktest.Name(t)
			lease, err := holder.Lock(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Unlock(context.Background())
			for range 3 {
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_, err := waiter.Lock(ctx, name)
				cancel()
				if !errors.Is(err, dlock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Lock: %v", err)
				}
				if msg := err.Error(); strings.ContainsAny(msg, "\n") || strings.Contains(msg, "SQLSTATE") || strings.Contains(msg, "invalid connection") {
					t.Fatalf("Lock's error: %q", msg)
				}
			}
			time.Sleep(300 * time.Millisecond) // background clean-ups log, if they do
			if s := logs.String(); strings.Contains(s, "WARN") {
				t.Fatalf("a wait that held nothing logged:\n%s", s)
			}
			if s := drv.String(); s != "" {
				t.Fatalf("the driver logged:\n%s", s)
			}
		})
	}
}
