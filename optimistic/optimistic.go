// Package optimistic updates rows by compare-and-swap on a version column:
//
//	UPDATE goods SET stock = ?, version = version + 1 WHERE id = ? AND version = ?
//
// Zero rows means someone else changed the row since it was read:
// ErrConflict, and the caller reads again and retries (Retry does that
// with a bounded number of attempts and jittered backoff). Versions only
// ever increase, so a row that went A → B → A still fails a writer that
// read it at the first A (the ABA problem a value comparison has). The
// version always changes, so MySQL's rows-affected (changed, not matched,
// rows) still counts the matched row.
//
// Table and column names are validated identifiers, quoted for the
// dialect; values are always bind parameters.
package optimistic

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/sqldialect"
)

// ErrConflict is returned by Table.Update when the row's version was no
// longer the one given (or the row is gone), and wrapped by Retry when its
// attempts ran out.
var ErrConflict = errors.New("optimistic: version conflict")

// Execer is what Update runs on: *sql.DB, *sql.Conn or a caller's *sql.Tx.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Querier is what Get runs on: *sql.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Table is a versioned table.
type Table struct {
	db                   *sql.DB
	rawName, rawID, rawV string

	mu                sync.Mutex
	d                 sqldialect.Dialect // 0 until known
	name, id, version string             // quoted for d
}

// NewTable describes table name with primary key column id and version
// column version (an integer) in db, opened with any database/sql driver
// (the dialect is told at first use, see tablelock.New). It does no I/O.
// Behind a connection pooler (PgBouncer), the first use refuses pgx's
// default query mode, whose prepared statements do not survive the pooler.
func NewTable(db *sql.DB, name, id, version string) (*Table, error) {
	if db == nil {
		return nil, errors.New("optimistic: nil *sql.DB")
	}
	return newTable(db, name, id, version)
}

// newTable is NewTable, db nil for a table whose dialect is set.
func newTable(db *sql.DB, name, id, version string) (*Table, error) {
	for _, ident := range []string{name, id, version} {
		if !sqldialect.ValidIdentifier(ident) {
			return nil, fmt.Errorf("optimistic: invalid identifier %q: want a letter or _, then letters, digits or _, at most 63 bytes", ident)
		}
	}
	if id == version {
		return nil, errors.New("optimistic: id and version columns are the same")
	}
	return &Table{db: db, rawName: name, rawID: id, rawV: version}, nil
}

// dialect returns the database's dialect, told at first use, with the
// table's quoted names.
func (t *Table) dialect(ctx context.Context) (sqldialect.Dialect, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.d != 0 {
		return t.d, nil
	}
	d, err := sqldialect.Of(ctx, t.db)
	if err == nil && d == sqldialect.Postgres {
		err = sqldialect.CheckPooledStatements(ctx, t.db)
	}
	if err != nil {
		return 0, fmt.Errorf("optimistic: %w", err)
	}
	t.d, t.name, t.id, t.version = d, d.Quote(t.rawName), d.Quote(t.rawID), d.Quote(t.rawV)
	return d, nil
}

// Get reads the row's version and the named columns into dest (one
// pointer per column). It returns sql.ErrNoRows when there is no row.
func (t *Table) Get(ctx context.Context, q Querier, id any, cols []string, dest ...any) (version int64, err error) {
	query, err := t.selectRow(ctx, cols, dest)
	if err != nil {
		return 0, err
	}
	err = q.QueryRowContext(ctx, query, id).Scan(append([]any{&version}, dest...)...)
	return version, err
}

// selectRow is Get's statement, after its checks.
func (t *Table) selectRow(ctx context.Context, cols []string, dest []any) (string, error) {
	if len(cols) != len(dest) {
		return "", fmt.Errorf("optimistic: %d columns but %d destinations", len(cols), len(dest))
	}
	if err := checkColumns(cols); err != nil {
		return "", err
	}
	d, err := t.dialect(ctx)
	if err != nil {
		return "", err
	}
	sel := append([]string{t.version}, quoteAll(d, cols)...)
	return fmt.Sprintf("SELECT %s FROM %s WHERE %s = %s", strings.Join(sel, ", "), t.name, t.id, d.Placeholder(1)), nil
}

// Update sets the columns in set on the row with the given id, if its
// version is still version, and returns the new version (version+1). It
// returns ErrConflict when the version moved on or the row is gone, and
// when the server rolled the update back for a concurrent write to the
// row (a deadlock, or on a Galera cluster a write on another node that
// certified first: error 1213), beside the server's error; in a
// caller's transaction that rollback ended the transaction.
func (t *Table) Update(ctx context.Context, e Execer, id any, version int64, set map[string]any) (int64, error) {
	query, args, err := t.updateRow(ctx, id, version, set)
	if err != nil {
		return 0, err
	}
	res, err := e.ExecContext(ctx, query, args...)
	if sqldialect.Deadlock(err) {
		return 0, fmt.Errorf("%w: %s %v was written concurrently: %w", ErrConflict, t.rawName, id, err)
	}
	if err != nil {
		return 0, err
	}
	rows, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	return t.updated(rows, id, version)
}

// updated is Update's outcome for the rows the statement changed.
func (t *Table) updated(rows int64, id any, version int64) (int64, error) {
	if rows == 0 {
		return 0, fmt.Errorf("%w: %s %v is not at version %d", ErrConflict, t.rawName, id, version)
	}
	return version + 1, nil
}

// updateRow is Update's statement and its arguments, after its checks.
func (t *Table) updateRow(ctx context.Context, id any, version int64, set map[string]any) (string, []any, error) {
	if len(set) == 0 {
		return "", nil, errors.New("optimistic: nothing to set")
	}
	cols := make([]string, 0, len(set))
	for c := range set {
		cols = append(cols, c)
	}
	slices.Sort(cols) // a stable statement text, so drivers can cache it
	if err := checkColumns(cols); err != nil {
		return "", nil, err
	}
	for _, c := range cols {
		if c == t.rawID || c == t.rawV {
			return "", nil, fmt.Errorf("optimistic: Update cannot set the %s column", c)
		}
	}
	d, err := t.dialect(ctx)
	if err != nil {
		return "", nil, err
	}
	var b strings.Builder
	args := make([]any, 0, len(cols)+2)
	fmt.Fprintf(&b, "UPDATE %s SET ", t.name)
	for i, c := range quoteAll(d, cols) {
		fmt.Fprintf(&b, "%s = %s, ", c, d.Placeholder(i+1))
		args = append(args, set[cols[i]])
	}
	n := len(cols)
	fmt.Fprintf(&b, "%s = %s + 1 WHERE %s = %s AND %s = %s", t.version, t.version, t.id, d.Placeholder(n+1), t.version, d.Placeholder(n+2))
	args = append(args, id, version)
	return b.String(), args, nil
}

// checkColumns refuses, before any I/O, a column that is not a plain
// identifier.
func checkColumns(cols []string) error {
	for _, c := range cols {
		if !sqldialect.ValidIdentifier(c) {
			return fmt.Errorf("optimistic: invalid column %q", c)
		}
	}
	return nil
}

func quoteAll(d sqldialect.Dialect, cols []string) []string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = d.Quote(c)
	}
	return out
}

// Policy bounds Retry. Its zero value is the default: up to
// DefaultMaxAttempts attempts with jittered exponential backoff.
type Policy struct {
	// MaxAttempts is how many times fn runs at most; 0 means
	// DefaultMaxAttempts.
	MaxAttempts int
	// Backoff is the pause before each retry; nil means
	// dlock.ExponentialBackoff(1ms, 100ms).
	Backoff dlock.Backoff
}

// DefaultMaxAttempts is how many attempts a Policy with MaxAttempts 0
// allows.
const DefaultMaxAttempts = 10

// DefaultPolicy is Policy{}: up to DefaultMaxAttempts attempts with
// jittered exponential backoff.
var DefaultPolicy = Policy{}

// Retry runs fn until it returns something other than an error wrapping
// ErrConflict, at most p.MaxAttempts times, pausing between attempts. fn
// reads the row and calls Update each time. When the attempts run out the
// error wraps ErrConflict and says how many were made. ctx governs the
// pauses and is passed to fn.
func Retry(ctx context.Context, p Policy, fn func(ctx context.Context) error) error {
	if fn == nil {
		return errors.New("optimistic: nil fn")
	}
	if p.MaxAttempts < 0 {
		return fmt.Errorf("optimistic: MaxAttempts must not be negative, got %d", p.MaxAttempts)
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	backoff := p.Backoff
	if backoff == nil {
		backoff = dlock.ExponentialBackoff(time.Millisecond, 100*time.Millisecond)
	}
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if !errors.Is(err, ErrConflict) {
			return err
		}
		if attempt == p.MaxAttempts {
			return fmt.Errorf("optimistic: gave up after %d attempts: %w", attempt, err)
		}
		t := time.NewTimer(backoff(attempt - 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return errjoin.Join(ctx.Err(), err)
		case <-t.C:
		}
	}
}
