// Package drivers holds the tests that run every SQL package (tablelock,
// advisory, pessimistic, optimistic) over database/sql drivers other than
// the two dlock knows by type: lib/pq, and otelsql wrapping pgx's stdlib
// and go-sql-driver/mysql, as an instrumented service opens its database.
// Their dialect is told by asking the server.
package drivers
