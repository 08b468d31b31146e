// Package sqldialect tells which database a *sql.DB talks to, from its
// driver, so SQL backends pick their statements before any I/O.
package sqldialect

import (
	"database/sql"
	"errors"
	"fmt"
	"strconv"

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

// Detect returns db's dialect: pgx/v5's stdlib driver is PostgreSQL,
// go-sql-driver/mysql is MySQL/MariaDB. Anything else is an error.
func Detect(db *sql.DB) (Dialect, error) {
	if db == nil {
		return 0, errors.New("nil *sql.DB")
	}
	switch drv := db.Driver().(type) {
	case *stdlib.Driver:
		return Postgres, nil
	case *mysql.MySQLDriver:
		return MySQL, nil
	default:
		return 0, fmt.Errorf("unsupported database/sql driver %T: use github.com/jackc/pgx/v5/stdlib or github.com/go-sql-driver/mysql", drv)
	}
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
