package advisory

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/dlockhq/dlock/internal/sqldialect"
)

// myPrune deletes a name's holder row unless a session holds its lock now.
const myPrune = `DELETE FROM dlock_fences WHERE name = ? AND IS_USED_LOCK(?) IS NULL`

// Prune deletes what the advisory locks of free names keep on the server,
// and returns how many rows it deleted: on MySQL/MariaDB the holder rows
// of dlock_fences that sessions which ended without unlocking left behind
// (Unlock deletes its own), on PostgreSQL
// nothing (its tokens come from one sequence for every name). It is safe
// for fencing: MySQL tokens are a hybrid clock, so a name that comes back
// gets a larger token than it had, provided the server's clock does not
// step back. ctx governs the statements; db may use any driver.
func Prune(ctx context.Context, db *sql.DB) (int64, error) {
	if db == nil {
		return 0, errors.New("advisory: nil *sql.DB")
	}
	d, err := sqldialect.Of(ctx, db)
	if err != nil || d != sqldialect.MySQL {
		return 0, err
	}
	rows, err := db.QueryContext(ctx, "SELECT name FROM dlock_fences")
	if err != nil {
		return 0, fmt.Errorf("advisory: prune: %w", sqldialect.SchemaHint(err))
	}
	var names []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return 0, errors.Join(err, rows.Close())
		}
		names = append(names, name)
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	var deleted int64
	for _, name := range names {
		res, err := db.ExecContext(ctx, myPrune, name, MySQLName(name))
		if err != nil {
			return deleted, fmt.Errorf("advisory: prune %q: %w", name, err)
		}
		n, _ := res.RowsAffected()
		deleted += n
	}
	return deleted, nil
}
