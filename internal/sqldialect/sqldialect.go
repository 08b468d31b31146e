// Package sqldialect tells which database a *sql.DB talks to, from its
// driver, so SQL backends pick their statements before any I/O.
package sqldialect

import (
	"database/sql"
	"errors"
	"fmt"

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
