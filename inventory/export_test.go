package inventory

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"time"

	"github.com/dlockhq/dlock/internal/sqlmigrate"
)

// MigrateDown reverts every inventory migration.
func MigrateDown(ctx context.Context, db *sql.DB) error {
	sub, err := fs.Sub(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	return sqlmigrate.Down(ctx, db, sub, MigrationsTable)
}

// Abandon shortens the age at which Reconcile takes a grant in the
// outbox as abandoned by its process.
func (s *Store) Abandon(d time.Duration) { s.gate.abandoned = d }

// GrantOnly is a redis-strategy Reserve whose process dies between the
// gate's grant and the database: the grant is in the outbox, the database
// never heard of the request.
func (s *Store) GrantOnly(ctx context.Context, r Request) error {
	v, err := s.gate.take(ctx, r, s.gate.attempt(r))
	if err == nil && v != gateGranted {
		err = fmt.Errorf("the gate answered %d, not a grant", v)
	}
	return err
}

// HoldRebuild holds the rebuild of lost counts, as a rebuild stuck on a
// frozen server would, until the function it returns is called.
func (s *Store) HoldRebuild() (release func()) {
	s.gate.rebuilding <- struct{}{}
	return func() { <-s.gate.rebuilding }
}
