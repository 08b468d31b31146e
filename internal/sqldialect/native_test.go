package sqldialect_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	_ "github.com/lib/pq" // registers "postgres": the database/sql path

	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/testenv"
)

// TestQueryRow runs QueryRow on pgx (queried through pgx directly), on
// lib/pq and on go-sql-driver/mysql (through database/sql): the same
// scans, skipped columns and empty results.
func TestQueryRow(t *testing.T) {
	for _, c := range []struct {
		name, one, none string
		open            func(testing.TB) *sql.DB
	}{
		{"pgx", "SELECT $1::bigint + 1, 'skipped', $2::text", "SELECT 1 WHERE false", testenv.Postgres},
		{"lib-pq", "SELECT $1::bigint + 1, 'skipped', $2::text", "SELECT 1 WHERE false", func(t testing.TB) *sql.DB {
			testenv.Postgres(t) // fails or skips as the other tests do when the server is missing
			return testenv.Open(t, "postgres", testenv.DSN("pgx"))
		}},
		{"mysql", "SELECT ? + 1, 'skipped', ?", "SELECT 1 FROM DUAL WHERE false", testenv.MySQL},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := c.open(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var n int64
			var s sql.NullString
			if err := sqldialect.QueryRow(ctx, conn, c.one, []any{int64(41), "x"}, &n, nil, &s); err != nil {
				t.Fatal(err)
			}
			if n != 42 || s.String != "x" {
				t.Fatalf("scanned %d, %q; want 42, \"x\"", n, s.String)
			}
			err = sqldialect.QueryRow(ctx, conn, c.none, nil, &n)
			if !errors.Is(err, sql.ErrNoRows) {
				t.Fatalf("empty result: %v, want sql.ErrNoRows", err)
			}
			err = sqldialect.QueryRow(ctx, conn, "SELECT no_such_column", nil, &n)
			if err == nil {
				t.Fatal("a bad statement returned no error")
			}
		})
	}
}

// TestQueryRowCancelled cancels a statement that QueryRow runs on pgx
// directly: it returns at once, and the broken connection is not given
// back to the pool for the next statement.
func TestQueryRowCancelled(t *testing.T) {
	db := testenv.Postgres(t)
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var pid int64
	if err := sqldialect.QueryRow(context.Background(), conn, "SELECT pg_backend_pid()", nil, &pid); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = sqldialect.QueryRow(ctx, conn, "SELECT pg_sleep(10)", nil, nil)
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("cancelled statement: %v after %v", err, time.Since(start))
	}
	conn.Close()
	var again int64
	if err := db.QueryRowContext(context.Background(), "SELECT pg_backend_pid()").Scan(&again); err != nil {
		t.Fatalf("the next statement: %v", err)
	}
	if again == pid {
		t.Fatalf("the cancelled session %d went back to the pool", pid)
	}
}
