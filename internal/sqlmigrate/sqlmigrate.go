// Package sqlmigrate applies embedded golang-migrate migrations to a
// caller's *sql.DB over one connection it borrows, never closing the DB.
package sqlmigrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/golang-migrate/migrate/v4/database/mysql"
	"github.com/golang-migrate/migrate/v4/database/postgres"
	"github.com/golang-migrate/migrate/v4/source"
	"github.com/golang-migrate/migrate/v4/source/iofs"

	"github.com/dlockhq/dlock/internal/sqldialect"
)

// Up applies every migration in fsys/<dialect> not yet recorded in table.
// A database that a later release migrated further than fsys goes (its
// version is past fsys's last, and not dirty) is left as it is: an
// instance of the earlier release, restarted while the next one rolls
// out, works on it, since no migration takes from the schema what an
// earlier release uses.
func Up(ctx context.Context, db *sql.DB, fsys fs.FS, table string) error {
	return run(ctx, db, fsys, table, func(m *migrate.Migrate, last uint) error {
		if v, dirty, err := m.Version(); err == nil && !dirty && v > last {
			return nil
		}
		return m.Up()
	})
}

// Down reverts every migration recorded in table.
func Down(ctx context.Context, db *sql.DB, fsys fs.FS, table string) error {
	return run(ctx, db, fsys, table, func(m *migrate.Migrate, _ uint) error { return m.Down() })
}

// Steps applies the next n migrations (n > 0) or reverts the last -n
// (n < 0), as golang-migrate's CLI's up N and down N do.
func Steps(ctx context.Context, db *sql.DB, fsys fs.FS, table string, n int) error {
	return run(ctx, db, fsys, table, func(m *migrate.Migrate, _ uint) error { return m.Steps(n) })
}

// Force records version v as applied and clean, running nothing: how a
// DBA clears the dirty flag of a migration that failed halfway, after
// fixing the schema by hand (golang-migrate's force V; -1 for none).
func Force(ctx context.Context, db *sql.DB, fsys fs.FS, table string, v int) error {
	return run(ctx, db, fsys, table, func(m *migrate.Migrate, _ uint) error { return m.Force(v) })
}

// lastVersion is the version of src's last migration.
func lastVersion(src source.Driver) (uint, error) {
	last, err := src.First()
	if err != nil {
		return 0, err
	}
	for {
		next, err := src.Next(last)
		if errors.Is(err, fs.ErrNotExist) {
			return last, nil
		}
		if err != nil {
			return 0, err
		}
		last = next
	}
}

// Latest is the version of the last migration in fsys/<dialect>.
func Latest(fsys fs.FS, dialect sqldialect.Dialect) (uint, error) {
	src, last, err := sourceOf(fsys, dialect)
	if err != nil {
		return 0, err
	}
	return last, src.Close()
}

// sourceOf is the migrations of fsys/<dialect> and its last version.
func sourceOf(fsys fs.FS, dialect sqldialect.Dialect) (source.Driver, uint, error) {
	dir, err := fs.Sub(fsys, dialect.String())
	if err != nil {
		return nil, 0, err
	}
	src, err := iofs.New(dir, ".")
	if err != nil {
		return nil, 0, fmt.Errorf("migrations for %s: %w", dialect, err)
	}
	last, err := lastVersion(src)
	if err != nil {
		return nil, 0, errors.Join(fmt.Errorf("migrations for %s: %w", dialect, err), src.Close())
	}
	return src, last, nil
}

func run(ctx context.Context, db *sql.DB, fsys fs.FS, table string, step func(m *migrate.Migrate, last uint) error) (err error) {
	dialect, err := sqldialect.Of(ctx, db)
	if err != nil {
		return err
	}
	src, last, err := sourceOf(fsys, dialect)
	if err != nil {
		return err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	var drv database.Driver
	switch dialect {
	case sqldialect.Postgres:
		drv, err = postgres.WithConnection(ctx, conn, &postgres.Config{MigrationsTable: table})
	case sqldialect.MySQL:
		drv, err = mysql.WithConnection(ctx, conn, &mysql.Config{MigrationsTable: table})
	}
	if err != nil {
		return errors.Join(err, conn.Close())
	}
	m, err := migrate.NewWithInstance("iofs", src, dialect.String(), drv)
	if err != nil {
		return errors.Join(err, drv.Close())
	}
	// Close closes only the borrowed connection: the drivers were given a
	// *sql.Conn, not the caller's *sql.DB.
	defer func() {
		srcErr, dbErr := m.Close()
		err = errors.Join(err, srcErr, dbErr)
	}()
	stop := context.AfterFunc(ctx, func() { m.GracefulStop <- true })
	defer stop()
	if err := step(m, last); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return err
	}
	return ctx.Err()
}
