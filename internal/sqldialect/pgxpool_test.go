package sqldialect_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/testenv"
)

// PgxPool finds the pool behind stdlib.OpenDBFromPool, and nothing behind
// a *sql.DB of its own connections.
func TestPgxPool(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), testenv.DSN("pgx")) // connects lazily
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if got := sqldialect.PgxPool(db); got != pool {
		t.Fatalf("PgxPool(OpenDBFromPool(pool)) = %p, want %p", got, pool)
	}
	plain, err := sql.Open("pgx", testenv.DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if got := sqldialect.PgxPool(plain); got != nil {
		t.Fatalf("PgxPool(sql.Open) = %p, want nil", got)
	}
	if sqldialect.PgxPool(nil) != nil {
		t.Fatal("PgxPool(nil) is not nil")
	}
}
