package pessimistic

import (
	"database/sql/driver"
	"errors"
	"io"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockhq/dlock/internal/errjoin"
)

var (
	// ErrLockTimeout is wrapped by Do's error when a row lock was not
	// available: NOWAIT found it taken, or the lock wait timeout passed.
	ErrLockTimeout = errors.New("pessimistic: row lock not available")
	// ErrDeadlock is wrapped by Do's error when the server broke a
	// deadlock by aborting the transaction and the retries ran out.
	ErrDeadlock = errors.New("pessimistic: deadlock")
	// ErrSerialization is wrapped by Do's error when the transaction
	// kept failing serialization (SERIALIZABLE / REPEATABLE READ on
	// PostgreSQL) and the retries ran out.
	ErrSerialization = errors.New("pessimistic: serialization failure")
)

// code is a driver error's SQLSTATE (PostgreSQL, through the SQLState
// method pgconn.PgError has) or MySQL error number.
func code(err error) (sqlstate string, mysqlNumber uint16) {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		sqlstate = st.SQLState()
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		mysqlNumber = me.Number
	}
	return sqlstate, mysqlNumber
}

// IsLockNotAvailable reports whether err says a row lock could not be had:
// NOWAIT (PostgreSQL 55P03, MySQL 3572) or a lock wait timeout
// (PostgreSQL lock_timeout 55P03; MySQL 1205, after which only the
// statement is rolled back and the transaction may go on).
func IsLockNotAvailable(err error) bool {
	s, n := code(err)
	return s == "55P03" || n == 3572 || n == 1205
}

// IsDeadlock reports whether the server aborted err's transaction to break
// a deadlock (PostgreSQL 40P01, MySQL 1213): the whole transaction was
// rolled back and may be retried.
func IsDeadlock(err error) bool {
	s, n := code(err)
	return s == "40P01" || n == 1213
}

// IsSerializationFailure reports a PostgreSQL serialization failure
// (40001): the whole transaction may be retried.
func IsSerializationFailure(err error) bool {
	s, _ := code(err)
	return s == "40001"
}

// IsRetryable reports whether retrying the whole transaction can succeed:
// a deadlock or a serialization failure.
func IsRetryable(err error) bool { return IsDeadlock(err) || IsSerializationFailure(err) }

// IsCanceled reports a statement cancelled by the client or by a
// statement timeout (PostgreSQL 57014; MySQL 1317, 3024, MariaDB 1969).
func IsCanceled(err error) bool {
	s, n := code(err)
	return s == "57014" || n == 1317 || n == 3024 || n == 1969
}

// IsConnectionLost reports whether err says the session is gone, with any
// locks it held: a connection exception (PostgreSQL 08xxx), an
// administrator or crash shutdown (57P01, 57P05), an idle-in-transaction
// timeout (25P03), MySQL's "server has gone away" (2006) or "lost
// connection" (2013), or a broken connection seen by the driver.
func IsConnectionLost(err error) bool {
	s, n := code(err)
	switch {
	case strings.HasPrefix(s, "08"), s == "57P01", s == "57P05", s == "25P03", n == 2006, n == 2013:
		return true
	}
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, mysql.ErrInvalidConn)
}

// classify wraps err with the sentinel its behaviour maps to, keeping the
// driver error reachable with errors.As.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case IsLockNotAvailable(err):
		return errjoin.Join(ErrLockTimeout, err)
	case IsDeadlock(err):
		return errjoin.Join(ErrDeadlock, err)
	case IsSerializationFailure(err):
		return errjoin.Join(ErrSerialization, err)
	}
	return err
}
