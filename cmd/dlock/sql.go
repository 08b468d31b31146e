package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/sqlmigrate"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/tablelock"
)

// sqlOnly is the error for a SQL subcommand on another server.
func sqlOnly(sub string) error {
	return fmt.Errorf("%w: %s is for postgres:// and mysql:// URLs", errUsage, sub)
}

// schema is the migrations' state on a database.
type schema struct {
	Version int  `json:"version"`
	Latest  int  `json:"latest"`
	Dirty   bool `json:"dirty"`
}

func (s schema) String() string {
	switch {
	case s.Dirty:
		return fmt.Sprintf("schema version %d of %d, dirty: a migration failed halfway; see migrations/README.md", s.Version, s.Latest)
	case s.Version < s.Latest:
		return fmt.Sprintf("schema version %d of %d: run dlock migrate up", s.Version, s.Latest)
	}
	return fmt.Sprintf("schema version %d of %d: up to date", s.Version, s.Latest)
}

func migrate(ctx context.Context, t *target, op string, out printer) error {
	if t.db == nil {
		return sqlOnly("migrate")
	}
	switch op {
	case "up":
		if err := migrations.Up(ctx, t.db); err != nil {
			return err
		}
	case "status":
	default:
		return fmt.Errorf("%w: migrate up or migrate status, not %q", errUsage, op)
	}
	s, err := schemaOf(ctx, t)
	if err != nil {
		return err
	}
	out.print(s, s.String())
	return nil
}

// schemaOf reads the version dlock's migrations left on t's database,
// without writing: golang-migrate's own reader would create the version
// table on a database that has none.
func schemaOf(ctx context.Context, t *target) (schema, error) {
	latest, err := sqlmigrate.Latest(migrations.FS, t.dialect)
	if err != nil {
		return schema{}, err
	}
	s := schema{Latest: int(latest)}
	err = t.db.QueryRowContext(ctx, "SELECT version, dirty FROM "+migrations.TableName).Scan(&s.Version, &s.Dirty)
	if err != nil && !errors.Is(err, sql.ErrNoRows) && !sqldialect.MissingSchema(err) { // none: no migration has run
		return schema{}, err
	}
	return s, nil
}

// pruned is what prune did.
type pruned struct {
	Deleted int64 `json:"deleted"`
}

func prune(ctx context.Context, t *target, idle time.Duration, out printer) error {
	if t.db == nil {
		return sqlOnly("prune")
	}
	n, err := tablelock.Prune(ctx, t.db, idle)
	if err != nil {
		return err
	}
	m, err := advisory.Prune(ctx, t.db)
	if err != nil {
		return err
	}
	p := pruned{Deleted: n + m}
	out.print(p, fmt.Sprintf("deleted %d idle rows (lock table: %d, advisory fences: %d)", p.Deleted, n, m))
	return nil
}
