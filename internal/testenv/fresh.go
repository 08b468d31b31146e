package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Fresh opens an empty schema (PostgreSQL) or database (MySQL) of its own,
// dropped when t ends, for tests that create and drop tables while other
// packages' tests use the shared one. driver is "pgx" or "mysql".
func Fresh(t testing.TB, driver string) *sql.DB {
	t.Helper()
	return Open(t, driver, FreshDSN(t, driver))
}

// Open opens dsn with driver; t.Cleanup closes it.
func Open(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	driver, _ = SplitMode(driver)
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxIdleConns(64)
	t.Cleanup(func() { db.Close() })
	return db
}

// SplitMode splits a test's driver name "pgx+<mode>" (PGDrivers) into
// the driver and pgx's default_query_exec_mode; other names have no mode.
func SplitMode(name string) (driver, mode string) {
	driver, mode, _ = strings.Cut(name, "+")
	return driver, mode
}

// PGDrivers are driver names for Fresh and Open that reach PostgreSQL
// under pgx's query modes users behind a pooler pick.
var PGDrivers = []string{"pgx+simple_protocol", "pgx+exec"}

// FreshDSN makes the schema or database of Fresh and returns its DSN.
// driver is "pgx", "mysql" or one of PGDrivers.
func FreshDSN(t testing.TB, driver string) string {
	t.Helper()
	driver, mode := SplitMode(driver)
	var admin *sql.DB
	if driver == "pgx" {
		admin = Postgres(t)
	} else {
		admin = MySQL(t)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "dlock_test_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	create, drop := "CREATE SCHEMA "+name, "DROP SCHEMA "+name+" CASCADE"
	if driver == "mysql" {
		create, drop = "CREATE DATABASE "+name, "DROP DATABASE "+name
	}
	if _, err := admin.ExecContext(ctx, create); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := admin.ExecContext(ctx, drop); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})

	dsn := DSN(driver)
	if driver == "pgx" {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set("search_path", name)
		if mode != "" {
			q.Set("default_query_exec_mode", mode)
		}
		u.RawQuery = q.Encode()
		dsn = u.String()
	} else {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName = name
		dsn = cfg.FormatDSN()
	}
	return dsn
}
