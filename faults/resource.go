package faults

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrStale is returned by Resource.Begin to a holder whose token is older
// than one the resource has already seen: its lease has ended and another
// holder has begun.
var ErrStale = errors.New("faults: stale fencing token")

// Resource is what a lock protects in the fault suite: a counter in a
// PostgreSQL row that every holder reads and increments, kept twice. The
// fenced counter checks the holder's fencing token (the storage side of
// fencing: a read raises the row's fence to the token, and a write is
// applied only while the fence is still the writer's); the unfenced one is
// written by every holder unconditionally, as code without fencing would.
type Resource struct {
	db   *sql.DB
	name string
}

// Snapshot is what a holder read in Begin.
type Snapshot struct {
	Token    uint64
	Fenced   int64
	Unfenced int64
	Stale    bool // the fence was past Token: Commit will not write the fenced counter
}

// NewResource creates the resource name (table dlock_fault_resource in db,
// a PostgreSQL database) with both counters at zero.
func NewResource(ctx context.Context, db *sql.DB, name string) (*Resource, error) {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS dlock_fault_resource (
	name     text PRIMARY KEY,
	fence    bigint NOT NULL,
	fenced   bigint NOT NULL,
	unfenced bigint NOT NULL)`); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO dlock_fault_resource VALUES ($1, 0, 0, 0)
ON CONFLICT (name) DO UPDATE SET fence = 0, fenced = 0, unfenced = 0`, name); err != nil {
		return nil, err
	}
	return OpenResource(db, name), nil
}

// OpenResource returns the resource name that NewResource created.
func OpenResource(db *sql.DB, name string) *Resource { return &Resource{db: db, name: name} }

// Begin reads both counters as the holder of token and raises the fence
// to token; Snapshot.Stale says a newer token had been there first.
func (r *Resource) Begin(ctx context.Context, token uint64) (Snapshot, error) {
	s := Snapshot{Token: token}
	var fence int64
	err := r.db.QueryRowContext(ctx, `UPDATE dlock_fault_resource SET fence = GREATEST(fence, $2)
WHERE name = $1 RETURNING fence, fenced, unfenced`, r.name, int64(token)).Scan(&fence, &s.Fenced, &s.Unfenced)
	if err != nil {
		return s, fmt.Errorf("faults: read %s: %w", r.name, err)
	}
	s.Stale = fence != int64(token)
	return s, nil
}

// Commit writes both counters, one more than s read. The fenced write is
// applied only if no newer token has begun since; accepted says whether
// it was. The unfenced write always is.
func (r *Resource) Commit(ctx context.Context, s Snapshot) (accepted bool, err error) {
	res, err := r.db.ExecContext(ctx, `UPDATE dlock_fault_resource SET fenced = $2 WHERE name = $1 AND fence = $3`,
		r.name, s.Fenced+1, int64(s.Token))
	if err != nil {
		return false, fmt.Errorf("faults: write %s: %w", r.name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if _, err := r.db.ExecContext(ctx, `UPDATE dlock_fault_resource SET unfenced = $2 WHERE name = $1`, r.name, s.Unfenced+1); err != nil {
		return n == 1, fmt.Errorf("faults: write %s: %w", r.name, err)
	}
	return n == 1, nil
}

// Counters returns the fenced and unfenced counters.
func (r *Resource) Counters(ctx context.Context) (fenced, unfenced int64, err error) {
	err = r.db.QueryRowContext(ctx, `SELECT fenced, unfenced FROM dlock_fault_resource WHERE name = $1`, r.name).Scan(&fenced, &unfenced)
	return fenced, unfenced, err
}
