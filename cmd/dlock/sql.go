package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

func migrate(ctx context.Context, t *target, args []string, out printer) error {
	if t.db == nil {
		return sqlOnly("migrate")
	}
	op, n, err := migration(args)
	if err != nil {
		return err
	}
	switch op {
	case "up":
		if n == 0 {
			err = migrations.Up(ctx, t.db)
		} else {
			err = sqlmigrate.Steps(ctx, t.db, migrations.FS, migrations.TableName, n)
		}
	case "down":
		err = sqlmigrate.Steps(ctx, t.db, migrations.FS, migrations.TableName, -n)
	case "force":
		err = sqlmigrate.Force(ctx, t.db, migrations.FS, migrations.TableName, n)
	}
	if err != nil {
		return fmt.Errorf("migrate %s: %w", strings.Join(args, " "), err)
	}
	s, err := schemaOf(ctx, t)
	if err != nil {
		return err
	}
	if op == "version" {
		out.print(s, strconv.Itoa(s.Version))
		return nil
	}
	out.print(s, s.String())
	return nil
}

// migration reads migrate's arguments, as golang-migrate's CLI takes
// them: up [N], down N (N is required: down drops the lock tables, and
// every lock in them), force V, version, status.
func migration(args []string) (op string, n int, err error) {
	op = args[0]
	number := func(what string, least int) (int, error) {
		if len(args) != 2 {
			return 0, fmt.Errorf("%w: migrate %s needs %s", errUsage, op, what)
		}
		v, err := strconv.Atoi(args[1])
		if err != nil || v < least {
			return 0, fmt.Errorf("%w: migrate %s %q: %s must be a whole number of at least %d", errUsage, op, args[1], what, least)
		}
		return v, nil
	}
	switch {
	case op == "up" && len(args) == 1, op == "version" && len(args) == 1, op == "status" && len(args) == 1:
		return op, 0, nil
	case op == "up":
		n, err = number("N, how many migrations to apply", 1)
	case op == "down":
		n, err = number("N, how many migrations to revert (down drops dlock's tables with the locks in them)", 1)
	case op == "force":
		n, err = number("V, the version to record as clean", -1)
	default:
		err = fmt.Errorf("%w: migrate up [N], down N, force V, version or status, not %q", errUsage, strings.Join(args, " "))
	}
	return op, n, err
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
