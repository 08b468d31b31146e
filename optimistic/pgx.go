package optimistic

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/dlockhq/dlock/internal/sqldialect"
)

// PgxQuerier is what GetPgx runs on: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type PgxQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PgxExecer is what UpdatePgx runs on: a *pgxpool.Pool, a *pgx.Conn or a
// pgx.Tx.
type PgxExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// NewPgxTable is NewTable for pgx without database/sql, on PostgreSQL:
// its GetPgx and UpdatePgx run on a pool, a connection or a transaction
// of pgx (and Get and Update on a *sql.DB of the same database). It does
// no I/O.
func NewPgxTable(name, id, version string) (*Table, error) {
	t, err := newTable(nil, name, id, version)
	if err != nil {
		return nil, err
	}
	d := sqldialect.Postgres
	t.d, t.name, t.id, t.version = d, d.Quote(name), d.Quote(id), d.Quote(version)
	return t, nil
}

// GetPgx is Get on pgx. With no row it returns pgx.ErrNoRows, which
// wraps sql.ErrNoRows.
func (t *Table) GetPgx(ctx context.Context, q PgxQuerier, id any, cols []string, dest ...any) (version int64, err error) {
	query, err := t.selectRow(ctx, cols, dest)
	if err != nil {
		return 0, err
	}
	err = q.QueryRow(ctx, query, id).Scan(append([]any{&version}, dest...)...)
	return version, err
}

// UpdatePgx is Update on pgx.
func (t *Table) UpdatePgx(ctx context.Context, e PgxExecer, id any, version int64, set map[string]any) (int64, error) {
	query, args, err := t.updateRow(ctx, id, version, set)
	if err != nil {
		return 0, err
	}
	tag, err := e.Exec(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return t.updated(tag.RowsAffected(), id, version)
}
