package advisory_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

var databases = testenv.SQLDatabases

func migrated(t testing.TB, open func(testing.TB) *sql.DB) *sql.DB { return testenv.Migrated(t, open) }

func newLocker(t testing.TB, db *sql.DB, opts ...dlock.Option) *advisory.Locker {
	t.Helper()
	l, err := advisory.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}

func TestConformance(t *testing.T) { testenv.OnSQL(t, newLocker, dlocktest.Run) }

// Inspect with a label that is long and not ASCII: MySQL reports the
// owner id whole; PostgreSQL's application_name keeps the token and the
// hold id whole and the label as far as it fits, as the package doc says.
func TestInspectLabel(t *testing.T) {
	const label = "订单服务 inventory-deduction-worker-7"
	for _, d := range databases {
		t.Run(d.Name, func(t *testing.T) {
			ctx := context.Background()
			l := newLocker(t, migrated(t, d.Open), dlock.WithOwner(label))
			name := dlocktest.Name(t)
			lease, err := l.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			defer lease.Unlock(ctx)
			h, ok, err := l.Inspect(ctx, name)
			if err != nil || !ok {
				t.Fatalf("Inspect: %v, %v", ok, err)
			}
			if h.Token != lease.Token() {
				t.Errorf("Inspect's token %d, the lease's %d", h.Token, lease.Token())
			}
			hold := lease.Owner()[strings.LastIndexByte(lease.Owner(), '#'):]
			switch d.Driver {
			case "mysql":
				if h.Owner != lease.Owner() {
					t.Errorf("Inspect's owner %q, the lease's %q", h.Owner, lease.Owner())
				}
			default:
				if !strings.HasSuffix(h.Owner, hold) || len(h.Owner) > 63 {
					t.Errorf("Inspect's owner %q: want the hold id %q whole, within 63 bytes", h.Owner, hold)
				}
			}
		})
	}
}
