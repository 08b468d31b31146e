package advisory_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/advisory"
)

// A session advisory lock pins one pooled connection while held.
func ExampleNew() {
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	locker, err := advisory.New(db)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := locker.Lock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	// Write with lease.Token() so a stale holder's writes can be refused.
}

// Behind PgBouncer in transaction mode, lock for the length of a
// transaction instead.
func ExampleLocker_LockTx() {
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:6432/app")
	if err != nil {
		log.Fatal(err)
	}
	locker, err := advisory.New(db)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	token, err := locker.LockTx(ctx, tx, "account:7")
	if err != nil {
		log.Fatal(err)
	}
	_ = token                           // store it with the row the transaction writes
	if err := tx.Commit(); err != nil { // releases the lock
		log.Fatal(err)
	}
}
