package testenv

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockhq/dlock/dlocktest"
)

// MySQLCounter counts the statements its databases send to MySQL or
// MariaDB, where they leave the client: the server's own counters
// (Questions) are global, and other tests share the server.
type MySQLCounter struct{ n atomic.Int64 }

// Open opens the test MySQL database through c, as its own pool; t.Cleanup
// closes it.
func (c *MySQLCounter) Open(t testing.TB) *sql.DB {
	t.Helper()
	MySQL(t) // skips or fails t when the server is missing
	return c.OpenDSN(t, DSN("mysql"))
}

// OpenDSN is Open for the database at dsn (a FreshDSN).
func (c *MySQLCounter) OpenDSN(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(countingConnector{conn, &c.n})
	t.Cleanup(func() { db.Close() })
	return db
}

// Requests is the count so far.
func (c *MySQLCounter) Requests() dlocktest.Requests {
	return func(context.Context) (int64, error) { return c.n.Load(), nil }
}

type countingConnector struct {
	driver.Connector
	n *atomic.Int64
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return countingConn{conn.(mysqlConn), c.n}, nil
}

// mysqlConn is what go-sql-driver's connections implement and
// database/sql looks for.
type mysqlConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
	driver.NamedValueChecker
}

// countingConn counts each statement once: one with arguments, which the
// driver sends as a prepare and an execute, counts as one.
type countingConn struct {
	mysqlConn
	n *atomic.Int64
}

func (c countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.n.Add(1)
	return c.mysqlConn.ExecContext(ctx, q, args)
}

func (c countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.n.Add(1)
	return c.mysqlConn.QueryContext(ctx, q, args)
}
