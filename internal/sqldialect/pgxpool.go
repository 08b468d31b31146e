package sqldialect

import (
	"database/sql"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
)

// PgxPool returns the *pgxpool.Pool behind db when db was opened with
// pgx's stdlib.OpenDBFromPool (or stdlib.GetPoolConnector), else nil.
// Such a *sql.DB sets no bound of its own (its pool is the pgxpool's, 4
// connections by default), so Stats cannot tell that every connection is
// in use; the pgxpool's Stat can. Neither package exports the pool, so it
// is read from their unexported fields (database/sql's DB.connector,
// pgx's connector.pool), by name and type: if either layout changes, the
// answer is nil, and dlock falls back to what Stats says.
func PgxPool(db *sql.DB) *pgxpool.Pool {
	if db == nil {
		return nil
	}
	c := reflect.ValueOf(db).Elem().FieldByName("connector")
	if c.Kind() != reflect.Interface || c.IsNil() {
		return nil
	}
	c = c.Elem()
	if c.Kind() != reflect.Struct || c.Type().PkgPath() != "github.com/jackc/pgx/v5/stdlib" {
		return nil
	}
	p := c.FieldByName("pool")
	if !p.IsValid() || p.Type() != reflect.TypeFor[*pgxpool.Pool]() || p.IsNil() {
		return nil
	}
	return (*pgxpool.Pool)(p.UnsafePointer())
}

// OverPool builds a Locker with newLocker on pgx's database/sql adapter
// over pool (stdlib.OpenDBFromPool): the NewPool of packages tablelock
// and advisory (pkg, for the message). It returns the adapter, which the
// Locker's Close closes; pool stays the caller's.
func OverPool[L any](pool *pgxpool.Pool, pkg string, newLocker func(*sql.DB) (L, error)) (L, *sql.DB, error) {
	var none L
	if pool == nil {
		return none, nil, fmt.Errorf("%s: nil *pgxpool.Pool", pkg)
	}
	db := stdlib.OpenDBFromPool(pool)
	l, err := newLocker(db)
	if err != nil {
		_ = db.Close() // it opened nothing yet
		return none, nil, err
	}
	return l, db, nil
}
