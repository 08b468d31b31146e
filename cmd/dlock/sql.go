package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"time"

	"github.com/dlockhq/dlock/advisory"
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

// schemaOf reads the version dlock's migrations left on t's database.
func schemaOf(ctx context.Context, t *target) (schema, error) {
	files, err := fs.Glob(migrations.FS, t.dialect+"/*.up.sql")
	if err != nil {
		return schema{}, err
	}
	var s schema
	for _, f := range files {
		base := strings.TrimPrefix(f, t.dialect+"/")
		if v, err := strconv.Atoi(base[:strings.IndexByte(base, '_')]); err == nil {
			s.Latest = max(s.Latest, v)
		}
	}
	err = t.db.QueryRowContext(ctx, "SELECT version, dirty FROM "+migrations.TableName).Scan(&s.Version, &s.Dirty)
	if err != nil && !errors.Is(err, sql.ErrNoRows) && !missingTable(err) {
		return schema{}, err
	}
	return s, nil
}

// missingTable reports whether err says the version table does not exist
// (no migration has run).
func missingTable(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "does not exist") || strings.Contains(msg, "doesn't exist")
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
