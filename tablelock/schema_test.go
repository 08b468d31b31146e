package tablelock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/tablelock"
)

// A database whose dlock tables are older than the package's statements
// need is refused at the first call, with one line that names what is
// missing and the migration that brings it, and nothing is written. Once
// the DBA applies that migration, the same Locker works: it checks again
// while the check fails.
func TestOlderSchemaIsRefusedUntilMigrated(t *testing.T) {
	cases := []struct {
		name, driver string
		undo         string   // takes the schema back to before a migration
		want         string   // what the error names
		redo         []string // the migrations the DBA applies then
	}{
		{"postgres/000003", "pgx", "DROP TABLE dlock_waiters", "PostgreSQL migrations 000003 and 000004",
			[]string{"postgres/000003_create_dlock_waiters.up.sql", "postgres/000004_dlock_waiters_own_channel.up.sql", "postgres/000005_dlock_waiters_grant.up.sql", "postgres/000008_dlock_payload.up.sql"}},
		{"postgres/000004", "pgx", "ALTER TABLE dlock_waiters DROP COLUMN own_channel", "PostgreSQL migrations 000003 and 000004",
			[]string{"postgres/000004_dlock_waiters_own_channel.up.sql"}},
		{"postgres/000005", "pgx", "ALTER TABLE dlock_waiters DROP COLUMN owner, DROP COLUMN ttl_us, DROP COLUMN attempt", "PostgreSQL migration 000005",
			[]string{"postgres/000005_dlock_waiters_grant.up.sql"}},
		{"postgres/000001", "pgx", "DROP TABLE dlock_locks", "PostgreSQL migration 000001",
			[]string{"postgres/000001_create_dlock_locks.up.sql", "postgres/000008_dlock_payload.up.sql"}},
		{"postgres/000008", "pgx", "ALTER TABLE dlock_waiters DROP COLUMN payload", "PostgreSQL migration 000008",
			[]string{"postgres/000008_dlock_payload.up.sql"}},
		{"mysql/000004", "mysql", "ALTER TABLE dlock_locks DROP COLUMN waited_at", "MySQL migration 000004",
			[]string{"mysql/000004_dlock_locks_waited_at.up.sql"}},
		{"mysql/000001", "mysql", "DROP TABLE dlock_locks", "MySQL migration 000001",
			[]string{"mysql/000001_create_dlock_locks.up.sql", "mysql/000004_dlock_locks_waited_at.up.sql", "mysql/000011_dlock_locks_payload.up.sql"}},
		{"mysql/000011", "mysql", "ALTER TABLE dlock_locks DROP COLUMN payload", "MySQL migration 000011",
			[]string{"mysql/000011_dlock_locks_payload.up.sql"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			dsn := testenv.FreshDSN(t, c.driver)
			admin := testenv.Open(t, c.driver, dsn)
			if err := migrations.Up(ctx, admin); err != nil {
				t.Fatal(err)
			}
			exec := func(stmt string) {
				t.Helper()
				if _, err := admin.ExecContext(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			exec(c.undo)
			l := newLocker(t, testenv.Open(t, c.driver, dsn))
			name := dlocktest.Name(t)
			for _, call := range []struct {
				what string
				run  func() error
			}{
				{"Lock", func() error { _, err := l.Lock(ctx, name); return err }},
				{"TryLock", func() error { _, err := l.TryLock(ctx, name); return err }},
				{"Prune", func() error { _, err := tablelock.Prune(ctx, admin, time.Hour); return err }},
			} {
				err := call.run()
				switch {
				case !errors.Is(err, tablelock.ErrSchema):
					t.Fatalf("%s on the older schema: %v, want ErrSchema", call.what, err)
				case !strings.Contains(err.Error(), c.want):
					t.Errorf("%s: %q does not name %s", call.what, err, c.want)
				case strings.Contains(err.Error(), "\n"):
					t.Errorf("%s: the error spans lines: %q", call.what, err)
				}
			}
			if c.undo != "DROP TABLE dlock_locks" {
				var rows int
				if err := admin.QueryRowContext(ctx, "SELECT COUNT(*) FROM dlock_locks").Scan(&rows); err != nil {
					t.Fatal(err)
				}
				if rows != 0 {
					t.Errorf("a refused Locker wrote %d rows", rows)
				}
			}
			for _, file := range c.redo {
				sql, err := migrations.FS.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				exec(string(sql))
			}
			lease, err := l.Lock(ctx, name)
			if err != nil {
				t.Fatalf("Lock once the migrations are applied: %v", err)
			}
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
