package sqldialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// ErrGaleraPrepared is why CheckGaleraTransactions refuses a database.
var ErrGaleraPrepared = errors.New("a Galera node can lose a transaction's certification conflict under prepared statements")

// CheckGaleraTransactions refuses db when it is a node of a Galera
// cluster (wsrep_on) and go-sql-driver/mysql sends statements with
// arguments as server-side prepared statements (its default; not with
// interpolateParams=true). A transaction that another node's commit
// aborts (a brute-force abort) is rolled back on the server, and under
// the binary protocol the deadlock error can fail to reach the client
// (measured on MariaDB 10.11): the transaction's later statements then
// run, and commit, on their own, and a COMMIT succeeds for a transaction
// that kept only part of its writes. The text protocol reports the error.
// The finding is remembered for db; it asks the server on one connection.
func CheckGaleraTransactions(ctx context.Context, db *sql.DB) error {
	if f, ok := galeraChecks.load(db); ok {
		return f.err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }() // back to the pool
	refusal, err := galeraPrepared(ctx, conn)
	if err != nil {
		return err
	}
	galeraChecks.store(db, galeraFinding{refusal})
	return refusal
}

// galeraChecks holds CheckGaleraTransactions's findings.
var galeraChecks perDB[galeraFinding]

type galeraFinding struct{ err error }

// galeraPrepared returns the refusal for conn's database, or nil: not a
// Galera node, or statements with arguments go as text.
func galeraPrepared(ctx context.Context, conn *sql.Conn) (refusal, err error) {
	if galera, err := GaleraNode(ctx, conn); err != nil || !galera {
		return nil, err
	}
	before, err := prepares(ctx, conn)
	if err != nil {
		return nil, err
	}
	var one int
	if err := conn.QueryRowContext(ctx, "SELECT ?", 1).Scan(&one); err != nil {
		return nil, err
	}
	after, err := prepares(ctx, conn)
	if err != nil || after == before {
		return nil, err
	}
	return fmt.Errorf("%w (the statements after it would commit alone): add interpolateParams=true to the DSN", ErrGaleraPrepared), nil
}

// prepares is how many statements conn's session has prepared.
func prepares(ctx context.Context, conn *sql.Conn) (int64, error) {
	var name string
	var n int64
	err := conn.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n)
	return n, err
}

// GaleraNode reports whether conn's server is a node of a Galera cluster
// (wsrep_on). MySQL without Galera has no such variable.
func GaleraNode(ctx context.Context, conn *sql.Conn) (bool, error) {
	var name, value string
	err := conn.QueryRowContext(ctx, "SHOW GLOBAL VARIABLES LIKE 'wsrep_on'").Scan(&name, &value)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil && strings.EqualFold(value, "ON"), err
}
