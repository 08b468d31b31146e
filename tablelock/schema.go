package tablelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dlockhq/dlock/internal/sqldialect"
)

// ErrSchema says the database's dlock tables are missing or older than
// this version of the package needs: apply the migrations (package
// migrations) and try again. A Locker checks once, at its first call that
// reaches the database, and checks again on its next call for as long as
// the check fails, so applying the migrations to a running service is
// enough.
var ErrSchema = errors.New("tablelock: the database's dlock tables are missing or out of date")

// schemaNeeds is, per dialect, one query whose single row says whether
// the tables and columns the statements of this package use are there,
// column by column, and the migration that brings each. The statements
// are written for that schema alone.
var schemaNeeds = map[sqldialect.Dialect]struct {
	query string
	what  []string
}{
	sqldialect.Postgres: {
		query: `SELECT to_regclass('dlock_locks') IS NOT NULL,
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('dlock_waiters') AND attname = 'own_channel' AND NOT attisdropped),
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('dlock_waiters') AND attname = 'attempt' AND NOT attisdropped),
	EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('dlock_waiters') AND attname = 'payload' AND NOT attisdropped)
		AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('dlock_locks') AND attname = 'payload' AND NOT attisdropped)`,
		what: []string{
			"table dlock_locks (PostgreSQL migration 000001)",
			"column dlock_waiters.own_channel (PostgreSQL migrations 000003 and 000004)",
			"column dlock_waiters.attempt (PostgreSQL migration 000005)",
			"column payload (PostgreSQL migration 000008)",
		},
	},
	sqldialect.MySQL: {
		query: `SELECT
	EXISTS (SELECT 1 FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = 'dlock_locks'),
	EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = 'dlock_locks' AND column_name = 'waited_at'),
	EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = 'dlock_locks' AND column_name = 'payload')`,
		what: []string{
			"table dlock_locks (MySQL migration 000001)",
			"column dlock_locks.waited_at (MySQL migration 000004)",
			"column dlock_locks.payload (MySQL migration 000011)",
		},
	},
}

// checkSchema reports, with ErrSchema, the first table or column db's
// schema lacks.
func checkSchema(ctx context.Context, db *sql.DB, d sqldialect.Dialect) error {
	need := schemaNeeds[d]
	have := make([]bool, len(need.what))
	dest := make([]any, len(have))
	for i := range have {
		dest[i] = &have[i]
	}
	if err := db.QueryRowContext(ctx, need.query).Scan(dest...); err != nil {
		return fmt.Errorf("tablelock: reading the schema: %w", err)
	}
	for i, ok := range have {
		if !ok {
			return fmt.Errorf("%w: no %s; apply the migrations with migrations.Up(ctx, db) or `migrate -path migrations/%s up`",
				ErrSchema, need.what[i], d)
		}
	}
	return nil
}
