package tablelock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/sqldialect"
)

// Table is the lock table, as created by package migrations.
const Table = "dlock_locks"

// Columns are the columns of Table this package reads and writes, in
// order. The migrations create exactly these (a test checks it).
var Columns = []string{"name", "owner", "reentry", "token", "acquired_at", "expires_at"}

// Locker is a lock table client for one owner.
type Locker struct {
	*dlock.Client
	listener  *listener // shared per *sql.DB; nil on MySQL
	closeOnce sync.Once
}

var (
	_ dlock.Locker    = (*Locker)(nil)
	_ dlock.Inspector = (*Locker)(nil)
)

// New returns a Locker on db, a PostgreSQL database opened with
// github.com/jackc/pgx/v5/stdlib or a MySQL/MariaDB database opened with
// github.com/go-sql-driver/mysql, whose schema is at the latest migration.
// New does no I/O: a nil db, an unknown driver or an invalid option is an
// error at once. db stays the caller's: Close does not close it.
func New(db *sql.DB, opts ...dlock.Option) (*Locker, error) {
	if db == nil {
		return nil, errors.New("tablelock: nil *sql.DB")
	}
	dialect, err := sqldialect.Detect(db)
	if err != nil {
		return nil, fmt.Errorf("tablelock: %w", err)
	}
	cfg, err := dlock.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	l := &Locker{}
	var b dlock.Backend
	switch dialect {
	case sqldialect.Postgres:
		l.listener = listenerFor(db, cfg.Logger)
		b = &postgres{db: db, listener: l.listener}
	case sqldialect.MySQL:
		b = &mysql{db: db}
	}
	if l.Client, err = dlock.NewClient(b, opts...); err != nil {
		if l.listener != nil {
			l.listener.unref()
		}
		return nil, err
	}
	return l, nil
}

// Close ends every lease of l and releases their locks (see
// dlock.Client.Close); the last Locker of a *sql.DB to close also closes
// the listener connection. ctx governs the releases. Close twice is a
// no-op.
func (l *Locker) Close(ctx context.Context) error {
	err := l.Client.Close(ctx)
	l.closeOnce.Do(func() {
		if l.listener != nil {
			l.listener.unref()
		}
	})
	return err
}

func micros(d time.Duration) int64 { return d.Microseconds() + boolInt(d%time.Microsecond != 0) }

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func notHeld(h dlock.Hold) error {
	return fmt.Errorf("%w: %q is not held by %q with token %d", dlock.ErrNotHeld, h.Name, h.Owner, h.Token)
}
