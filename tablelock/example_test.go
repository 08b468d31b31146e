package tablelock_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/tablelock"
)

// A lock that is a row of dlock_locks: it needs no connection held while
// it is held, and a holder that dies frees it when its lease runs out.
func ExampleNew() {
	db, err := sql.Open("mysql", "app@tcp(127.0.0.1:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := migrations.Up(ctx, db); err != nil { // creates dlock_locks, once
		log.Fatal(err)
	}
	locker, err := tablelock.New(db, dlock.WithTTL(30*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(ctx)
	lease, err := locker.Lock(ctx, "invoice:2026-11")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	select {
	case <-lease.Done():
		return // the lease was lost: stop writing
	default:
		// Write with lease.Token() so a stale holder's writes can be refused.
	}
}

// Rows of names no longer used can be deleted; a name that comes back
// still gets larger tokens.
func ExamplePrune() {
	db, err := sql.Open("mysql", "app@tcp(127.0.0.1:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	n, err := tablelock.Prune(context.Background(), db, 30*24*time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("deleted %d rows idle for 30 days", n)
}
