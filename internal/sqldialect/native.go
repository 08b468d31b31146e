package sqldialect

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/stdlib"
)

// QueryRow runs query, which returns one row, on conn, a pinned session,
// and scans the row into dest; a nil dest skips its column. On a pgx
// connection the query goes to pgx directly: through database/sql, each
// query run under a context that can be cancelled starts a goroutine to
// watch it (the Rows' awaitDone) and sets up a converter per column, about
// a quarter of the allocations of a lock and unlock on advisory/postgres
// (164 against 125 per cycle). pgx watches ctx in either case. With
// another driver it runs through database/sql, and sql.ErrNoRows reports
// an empty result either way. A statement on db's pool stays with
// db.QueryRowContext: database/sql retries it on another connection when
// the one it took turns out dead before the statement was sent.
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
