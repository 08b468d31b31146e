// Package sqlrecord keeps dlock.Records in the dlock_records table, for
// the SQL backends (tablelock and advisory): one statement to write,
// fenced by the token, and one to read, with the age on the server's
// clock.
package sqlrecord

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// On MySQL the assignments of ON DUPLICATE KEY UPDATE run left to right,
// each seeing the ones before: token is set last, so the others compare
// the row's token before this write.
const (
	myWrite = `INSERT INTO dlock_records (name, token, value, since, written_at)
VALUES (?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE
    since      = IF(VALUES(token) > token, VALUES(since), since),
    value      = IF(VALUES(token) >= token, VALUES(value), value),
    written_at = IF(VALUES(token) >= token, VALUES(written_at), written_at),
    token      = GREATEST(token, VALUES(token))`
	myToken = `SELECT token FROM dlock_records WHERE name = ?`
	myRead  = `SELECT token, value, TIMESTAMPDIFF(MICROSECOND, since, UTC_TIMESTAMP(6))
FROM dlock_records WHERE name = ?`

	pgWrite = `INSERT INTO dlock_records AS r (name, token, value, since, written_at)
VALUES ($1, $2, $3, clock_timestamp(), clock_timestamp())
ON CONFLICT (name) DO UPDATE SET
    since      = CASE WHEN EXCLUDED.token > r.token THEN EXCLUDED.since ELSE r.since END,
    value      = EXCLUDED.value,
    written_at = EXCLUDED.written_at,
    token      = EXCLUDED.token
WHERE r.token <= EXCLUDED.token`
	pgRead = `SELECT token, value, (extract(epoch FROM clock_timestamp() - since) * 1e6)::bigint
FROM dlock_records WHERE name = $1`
)

// Write writes value as name's record for token (see dlock.Recorder).
// ctx governs the statements.
func Write(ctx context.Context, db *sql.DB, name string, token uint64, value []byte) error {
	d, err := sqldialect.Of(ctx, db)
	if err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	if d == sqldialect.Postgres {
		res, err := db.ExecContext(ctx, pgWrite, name, int64(token), value)
		if err != nil {
			return sqldialect.SchemaHint(err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		return stale(name, token)
	}
	res, err := db.ExecContext(ctx, myWrite, name, token, value)
	if err != nil {
		return sqldialect.SchemaHint(err)
	}
	if n, err := res.RowsAffected(); err != nil || n > 0 {
		return err
	}
	// No row changed: a refused write, or one that wrote what was there
	// in the same microsecond.
	var now uint64
	if err := db.QueryRowContext(ctx, myToken, name).Scan(&now); err != nil {
		return err
	}
	if now > token {
		return stale(name, token)
	}
	return nil
}

func stale(name string, token uint64) error {
	return fmt.Errorf("%w: record %q, token %d", dlock.ErrStale, name, token)
}

// Read returns name's record. ctx governs the statement.
func Read(ctx context.Context, db *sql.DB, name string) (dlock.Record, bool, error) {
	d, err := sqldialect.Of(ctx, db)
	if err != nil {
		return dlock.Record{}, false, err
	}
	q := myRead
	if d == sqldialect.Postgres {
		q = pgRead
	}
	var (
		r   dlock.Record
		tok int64
		age int64
	)
	err = db.QueryRowContext(ctx, q, name).Scan(&tok, &r.Value, &age)
	if errors.Is(err, sql.ErrNoRows) {
		return dlock.Record{}, false, nil
	}
	if err != nil {
		return dlock.Record{}, false, sqldialect.SchemaHint(err)
	}
	r.Token, r.Age = uint64(tok), timeunit.Of(max(age, 0), time.Microsecond)
	return r, true, nil
}
