package migrations_test

import (
	"context"
	"database/sql"
	"io/fs"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/tablelock"
)

func columns(t *testing.T, db *sql.DB, driver string) []string {
	q := `SELECT column_name FROM information_schema.columns
	      WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`
	if driver == "mysql" {
		q = `SELECT column_name FROM information_schema.columns
		     WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position`
	}
	return list(t, db, q, tablelock.Table)
}

// routines lists the stored routines in db's schema.
func routines(t *testing.T, db *sql.DB, driver string) []string {
	q := `SELECT routine_name FROM information_schema.routines WHERE routine_schema = current_schema() ORDER BY 1`
	if driver == "mysql" {
		q = `SELECT routine_name FROM information_schema.routines WHERE routine_schema = DATABASE() ORDER BY 1`
	}
	return list(t, db, q)
}

// list runs q, a query of one text column, and returns its rows.
func list(t *testing.T, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// The schema the code uses is exactly what the migrations create, and up →
// down → up is clean.
func TestDrift(t *testing.T) {
	for _, driver := range []string{"pgx", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			db := testenv.Fresh(t, driver)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for round := 1; round <= 2; round++ {
				if err := migrations.Up(ctx, db); err != nil {
					t.Fatalf("up #%d: %v", round, err)
				}
				if err := migrations.Up(ctx, db); err != nil {
					t.Fatalf("up #%d again (no change): %v", round, err)
				}
				want := tablelock.Columns
				if driver == "mysql" {
					want = tablelock.MySQLColumns
				}
				if got := columns(t, db, driver); !slices.Equal(got, want) {
					t.Fatalf("up #%d: %s has columns %v, the code uses %v", round, tablelock.Table, got, want)
				}
				if got, want := routines(t, db, driver), map[string][]string{"mysql": {"dlock_fences_engine", "dlock_release_lock", "dlock_wait_lock"}}[driver]; !slices.Equal(got, want) {
					t.Fatalf("up #%d: routines %v, want %v", round, got, want)
				}
				// The code's statements run against the migrated schema.
				l, err := tablelock.New(db)
				if err != nil {
					t.Fatal(err)
				}
				lease, err := l.Lock(ctx, "drift")
				if err != nil {
					t.Fatalf("lock on the migrated schema: %v", err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				l.Close(ctx)
				// So do advisory's, procedures included (dlock_wait_lock,
				// dlock_release_lock on MySQL).
				a, err := advisory.New(db)
				if err != nil {
					t.Fatal(err)
				}
				if lease, err = a.Lock(ctx, "drift"); err != nil {
					t.Fatalf("advisory lock on the migrated schema: %v", err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatalf("advisory unlock on the migrated schema: %v", err)
				}
				a.Close(ctx)
				if err := migrations.Down(ctx, db); err != nil {
					t.Fatalf("down #%d: %v", round, err)
				}
				if got := columns(t, db, driver); len(got) != 0 {
					t.Fatalf("down #%d left %s with columns %v", round, tablelock.Table, got)
				}
				if got := routines(t, db, driver); len(got) != 0 {
					t.Fatalf("down #%d left routines %v", round, got)
				}
			}
		})
	}
}

// Every migration has both directions, and each MySQL file is one
// statement (MySQL cannot roll back DDL: a file that fails halfway would
// leave the schema between versions).
func TestMigrationFiles(t *testing.T) {
	for _, dialect := range []string{"postgres", "mysql"} {
		files, err := fs.Glob(migrations.FS, dialect+"/*.sql")
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no migrations (%v)", dialect, err)
		}
		for _, f := range files {
			other := strings.Replace(f, ".up.sql", ".down.sql", 1)
			if strings.HasSuffix(f, ".down.sql") {
				other = strings.Replace(f, ".down.sql", ".up.sql", 1)
			}
			if !slices.Contains(files, other) {
				t.Errorf("%s has no %s", f, path.Base(other))
			}
			if dialect != "mysql" {
				continue
			}
			body, _ := fs.ReadFile(migrations.FS, f)
			if n := statements(string(body)); n != 1 {
				t.Errorf("%s has %d statements, want 1", f, n)
			}
		}
	}
}

// statements counts the SQL statements in body, ignoring -- comments. A
// routine's body, from a line "BEGIN" to a line that starts with "END",
// is part of the statement that creates it, whatever it holds.
func statements(body string) int {
	n, routine := 0, false
	for _, line := range strings.Split(body, "\n") {
		if i := strings.Index(line, "--"); i >= 0 {
			line = line[:i]
		}
		switch {
		case strings.TrimSpace(line) == "BEGIN":
			routine = true
		case strings.HasPrefix(line, "END"):
			routine = false
		}
		if !routine {
			n += strings.Count(line, ";")
		}
	}
	return n
}

// dlock_fences is a MEMORY table where the server writes no binary log,
// and InnoDB where it does (a replica that restarts would lose a MEMORY
// table's rows and stop replicating); calling dlock_fences_engine again
// puts it back after a DBA moved it.
func TestFencesEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		binlog bool
		db     *sql.DB
		want   string
	}{
		{false, testenv.Fresh(t, "mysql"), "MEMORY"},
		{true, testenv.Open(t, "mysql", testenv.MariaDBServerWith(t, "--log-bin=binlog", "--server-id=1").DSN), "InnoDB"},
	} {
		if err := migrations.Up(ctx, c.db); err != nil {
			t.Fatal(err)
		}
		if got := fencesEngine(t, c.db); got != c.want {
			t.Errorf("binary log %v: dlock_fences is %s, want %s", c.binlog, got, c.want)
		}
		other := map[string]string{"MEMORY": "InnoDB", "InnoDB": "MEMORY"}[c.want]
		for _, stmt := range []string{"ALTER TABLE dlock_fences ENGINE=" + other, "CALL dlock_fences_engine()"} {
			if _, err := c.db.ExecContext(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
		if got := fencesEngine(t, c.db); got != c.want {
			t.Errorf("binary log %v: dlock_fences is %s after dlock_fences_engine, want %s", c.binlog, got, c.want)
		}
	}
}

// fencesEngine is the engine of db's dlock_fences.
func fencesEngine(t *testing.T, db *sql.DB) string {
	got := list(t, db, "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'dlock_fences'")
	if len(got) != 1 {
		t.Fatalf("dlock_fences: engines %v", got)
	}
	return got[0]
}

// Up leaves alone a database that a later release migrated further,
// whose version this one has no file for; a dirty one is still an error.
func TestUpAfterLaterRelease(t *testing.T) {
	for _, driver := range []string{"pgx", "mysql"} {
		t.Run(driver, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db := testenv.Fresh(t, driver)
			if err := migrations.Up(ctx, db); err != nil {
				t.Fatal(err)
			}
			if _, err := db.ExecContext(ctx, "UPDATE "+migrations.TableName+" SET version = 999"); err != nil {
				t.Fatal(err)
			}
			if err := migrations.Up(ctx, db); err != nil {
				t.Errorf("up on a database a later release migrated: %v", err)
			}
			if _, err := db.ExecContext(ctx, "UPDATE "+migrations.TableName+" SET dirty = true"); err != nil {
				t.Fatal(err)
			}
			if err := migrations.Up(ctx, db); err == nil {
				t.Error("up on a dirty database: no error")
			}
		})
	}
}
