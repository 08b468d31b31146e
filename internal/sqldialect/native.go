package sqldialect

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/stdlib"
)

// QueryRow runs query, which returns one row, on conn and scans the row
// into dest; a nil dest skips its column. On a pgx connection the query
// goes to pgx directly: through database/sql, each query run under a
// context that can be cancelled starts a goroutine to watch it (the Rows'
// awaitDone) and sets up a converter per column: on a lock's short
// statements, a good part of their client-side cost. pgx watches ctx in
// either case. With another driver it runs through database/sql, and
// sql.ErrNoRows reports an empty result either way.
func QueryRow(ctx context.Context, conn *sql.Conn, query string, args []any, dest ...any) error {
	native := false
	err := conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return nil
		}
		native = true
		return c.Conn().QueryRow(ctx, query, args...).Scan(dest...)
	})
	if native || err != nil {
		return err
	}
	for i, d := range dest {
		if d == nil {
			dest[i] = new(any)
		}
	}
	return conn.QueryRowContext(ctx, query, args...).Scan(dest...)
}

// DBQueryRow is QueryRow on a connection of db's pool.
func DBQueryRow(ctx context.Context, db *sql.DB, query string, args []any, dest ...any) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // back to the pool; it fails only when already closed
	return QueryRow(ctx, conn, query, args, dest...)
}
