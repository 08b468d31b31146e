// Package sqldialect tells which database a *sql.DB talks to: from its
// driver where dlock knows it, without I/O, and otherwise by asking the
// server once, so any database/sql driver works (lib/pq, pgx's stdlib,
// go-sql-driver/mysql, and instrumenting wrappers such as otelsql).
package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"
)

// Dialect is a SQL dialect dlock speaks.
type Dialect int

// The dialects.
const (
	Postgres Dialect = iota + 1
	MySQL            // MySQL 8 and MariaDB 10.5+
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// Known returns db's dialect without I/O when its driver is one dlock
// knows by type: pgx/v5's stdlib driver is PostgreSQL, go-sql-driver/mysql
// is MySQL/MariaDB. ok is false for any other driver (lib/pq, a wrapper
// such as otelsql): Of asks the server.
func Known(db *sql.DB) (d Dialect, ok bool) {
	switch db.Driver().(type) {
	case *stdlib.Driver:
		return Postgres, true
	case *mysql.MySQLDriver:
		return MySQL, true
	}
	return 0, false
}

// DBSystem is db's server as OpenTelemetry's db.system.name names it
// ("postgresql", "mysql"), or "" while its dialect is not known.
func DBSystem(db *sql.DB) string {
	d, ok := Known(db)
	if !ok {
		v, found := asked.Load(db)
		if !found {
			return ""
		}
		d = v.(Dialect)
	}
	if d == Postgres {
		return "postgresql"
	}
	return "mysql"
}

var asked sync.Map // *sql.DB → Dialect, for drivers Known does not know

// Of returns db's dialect: Known's answer, or else the server's, asked once
// per *sql.DB with SELECT version() (PostgreSQL's starts "PostgreSQL";
// MySQL's and MariaDB's with their version number). ctx governs the
// question.
func Of(ctx context.Context, db *sql.DB) (Dialect, error) {
	if db == nil {
		return 0, errors.New("nil *sql.DB")
	}
	if d, ok := Known(db); ok {
		return d, nil
	}
	if d, ok := asked.Load(db); ok {
		return d.(Dialect), nil
	}
	var version string
	if err := db.QueryRowContext(ctx, "SELECT version()").Scan(&version); err != nil {
		return 0, fmt.Errorf("telling the database's dialect (SELECT version()) over driver %T: %w", db.Driver(), err)
	}
	d, err := parseVersion(version)
	if err != nil {
		return 0, fmt.Errorf("driver %T: %w", db.Driver(), err)
	}
	asked.Store(db, d)
	return d, nil
}

// OfTx returns the dialect of tx's server, asked with SELECT version()
// inside tx: a *sql.Tx does not say which *sql.DB, or driver, it is of.
// ctx governs the question.
func OfTx(ctx context.Context, tx *sql.Tx) (Dialect, error) {
	var version string
	if err := tx.QueryRowContext(ctx, "SELECT version()").Scan(&version); err != nil {
		return 0, fmt.Errorf("telling the database's dialect (SELECT version()): %w", err)
	}
	return parseVersion(version)
}

func parseVersion(v string) (Dialect, error) {
	switch {
	case strings.HasPrefix(v, "PostgreSQL "):
		return Postgres, nil
	case v != "" && '0' <= v[0] && v[0] <= '9':
		return MySQL, nil
	}
	return 0, fmt.Errorf("unsupported database %q: dlock speaks PostgreSQL and MySQL/MariaDB", v)
}

// The server's clock in microseconds since the epoch, as SQL, for tokens
// that are hybrid clocks (max(last + 1, clock)) or the clock alone. MySQL's
// UNIX_TIMESTAMP(NOW(6)) converts from the session's time zone, so the
// value is the same in every session.
const (
	PostgresClockMicros = `(extract(epoch FROM clock_timestamp()) * 1e6)::bigint`
	MySQLClockMicros    = `CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)`
)

// MissingSchema reports whether err says a table or sequence does not
// exist: PostgreSQL SQLSTATE 42P01, MySQL/MariaDB error 1146.
func MissingSchema(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) && st.SQLState() == "42P01" {
		return true
	}
	var my *mysql.MySQLError
	return errors.As(err, &my) && my.Number == 1146
}

// Deadlock reports whether the server rolled back err's transaction to
// break a deadlock (PostgreSQL 40P01, MySQL 1213): nothing it did holds,
// and it may run again.
func Deadlock(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) && st.SQLState() == "40P01" {
		return true
	}
	var my *mysql.MySQLError
	return errors.As(err, &my) && my.Number == 1213
}

// Duplicate reports whether err is a unique key's violation (PostgreSQL
// 23505, MySQL 1062): the row exists already.
func Duplicate(err error) bool {
	var st interface{ SQLState() string }
	if errors.As(err, &st) && st.SQLState() == "23505" {
		return true
	}
	var my *mysql.MySQLError
	return errors.As(err, &my) && my.Number == 1062
}

// MissingColumn reports whether err says column does not exist:
// PostgreSQL SQLSTATE 42703, MySQL/MariaDB error 1054, naming column.
func MissingColumn(err error, column string) bool {
	if err == nil || !strings.Contains(err.Error(), column) {
		return false
	}
	var st interface{ SQLState() string }
	if errors.As(err, &st) && st.SQLState() == "42703" {
		return true
	}
	var my *mysql.MySQLError
	return errors.As(err, &my) && my.Number == 1054
}

// SchemaHint wraps err, when it says dlock's schema is missing, with what
// to do about it; any other err is returned as it is.
func SchemaHint(err error) error {
	if err == nil || !MissingSchema(err) {
		return err
	}
	return fmt.Errorf("%w (dlock's tables are missing: apply its migrations with migrations.Up(ctx, db), or migrate -path migrations/postgres or migrations/mysql up)", err)
}

// Placeholder is the n-th (from 1) bind parameter marker.
func (d Dialect) Placeholder(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// Quote quotes an identifier that ValidIdentifier accepted.
func (d Dialect) Quote(ident string) string {
	if d == MySQL {
		return "`" + ident + "`"
	}
	return `"` + ident + `"`
}

// ValidIdentifier reports whether s is a plain SQL identifier both
// dialects accept: a letter or underscore, then letters, digits or
// underscores, at most 63 bytes (PostgreSQL's limit; MySQL's is 64).
// Identifiers are validated, then quoted, never taken from input as SQL.
func ValidIdentifier(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
