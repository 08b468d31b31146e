package testenv

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/dlocktest"
)

// PGCounter counts the statements its databases send to PostgreSQL, for
// dlocktest.BenchHerd: PostgreSQL's own statistics reach pg_stat_database
// seconds late, so the count is taken where the statements leave, by a
// pgx tracer (pgx's hook for every query it sends). LISTEN's wait for a
// notification sends nothing and is not counted.
type PGCounter struct{ n atomic.Int64 }

// TraceQueryStart counts one statement (pgx.QueryTracer).
func (c *PGCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

// TraceQueryEnd is part of pgx.QueryTracer.
func (c *PGCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Open opens the test PostgreSQL database through c, as its own pool (a
// process of its own, for a herd across processes); t.Cleanup closes it.
func (c *PGCounter) Open(t testing.TB) *sql.DB {
	t.Helper()
	Postgres(t) // skips or fails t when the server is missing
	cfg, err := pgx.ParseConfig(DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = c
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}

// Requests reads the count, for dlocktest.BenchHerd.
func (c *PGCounter) Requests() dlocktest.Requests {
	return func(context.Context) (int64, error) { return c.n.Load(), nil }
}
