// Package migrations holds the schema dlock's SQL backends use, as
// golang-migrate migrations a DBA can review and apply:
//
//	migrate -path migrations/postgres -database 'postgres://…?x-migrations-table=dlock_schema_migrations' up
//	migrate -path migrations/mysql    -database 'mysql://…?x-migrations-table=dlock_schema_migrations' up
//
// or from Go with Up, over the same files embedded in the binary. The
// version table is dlock's own, TableName, so it never collides with the
// application's migrations.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/dlockhq/dlock/internal/sqlmigrate"
)

// TableName is the table that records which migrations have run.
const TableName = "dlock_schema_migrations"

// FS holds the migrations: postgres/*.sql and mysql/*.sql.
//
//go:embed postgres/*.sql mysql/*.sql
var FS embed.FS

// Up applies every migration not yet applied to db, a PostgreSQL (pgx/v5
// stdlib) or MySQL/MariaDB (go-sql-driver/mysql) database. ctx governs the
// run: when it ends, Up stops after the migration in progress. Up borrows
// one connection and never closes db. A database that a later release of
// dlock migrated further is left as it is, so that instances of this one
// keep starting while the next rolls out: no migration takes away what an
// earlier release uses.
func Up(ctx context.Context, db *sql.DB) error {
	if err := sqlmigrate.Up(ctx, db, FS, TableName); err != nil {
		return fmt.Errorf("dlock migrations up: %w", err)
	}
	return nil
}

// Down reverts every dlock migration on db, dropping dlock's tables and
// every lock in them. ctx governs the run as for Up.
func Down(ctx context.Context, db *sql.DB) error {
	if err := sqlmigrate.Down(ctx, db, FS, TableName); err != nil {
		return fmt.Errorf("dlock migrations down: %w", err)
	}
	return nil
}
