package inventory_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/inventory"
)

// Through PgBouncer's session and transaction pooling, under the pgx
// query modes a pooler lets through, every strategy reserves each unit
// once and keeps the per-user limit: each reservation is one transaction,
// which keeps its server session from BEGIN to COMMIT.
func TestThroughPgBouncer(t *testing.T) {
	for _, pooling := range []string{"session", "transaction"} {
		for _, mode := range []string{"exec", "simple_protocol"} {
			for _, st := range strategies {
				t.Run(pooling+"/"+mode+"/"+st.String(), func(t *testing.T) {
					db := testenv.Open(t, "pgx", testenv.FreshPgBouncerDSN(t, pooling, mode))
					db.SetMaxOpenConns(16)
					if err := inventory.Migrate(context.Background(), db); err != nil {
						t.Fatal(err)
					}
					contention(t, db, st)
					perUserLimit(t, db, st)
				})
			}
		}
	}
}

// New refuses, in one line before any reservation, a pooler the Store's
// statements or transactions would not survive: pgx's named statements
// behind transaction pooling, and statement pooling, which runs no
// transactions.
func TestPgBouncerRefusals(t *testing.T) {
	for _, c := range []struct {
		pooling, mode string
		is            error
		says          string
	}{
		// A pooler's mode is not visible: with pgx's default, session
		// pooling is refused too, as by tablelock and advisory.
		{"session", "", sqldialect.ErrPooledStatements, "default_query_exec_mode=exec"},
		{"transaction", "", sqldialect.ErrPooledStatements, "default_query_exec_mode=exec"},
		{"statement", "", sqldialect.ErrPooledStatements, "default_query_exec_mode=exec"},
		{"statement", "exec", nil, "use session or transaction pooling"},
		{"statement", "simple_protocol", nil, "use session or transaction pooling"},
	} {
		t.Run(c.pooling+"/"+c.mode, func(t *testing.T) {
			db := testenv.Open(t, "pgx", testenv.PgBouncerDSN(t, c.pooling, c.mode))
			_, err := inventory.New(db)
			if err == nil {
				t.Fatal("New accepted a pooler its reservations cannot run through")
			}
			if c.is != nil && !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.says) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("New: %q, want one line saying %q", err, c.says)
			}
		})
	}
	for _, pooling := range []string{"session", "transaction"} {
		db := testenv.Open(t, "pgx", testenv.PgBouncerDSN(t, pooling, "exec"))
		if _, err := inventory.New(db); err != nil {
			t.Fatalf("New behind %s pooling, pgx exec: %v", pooling, err)
		}
	}
}
