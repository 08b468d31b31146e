package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/pessimistic"
)

// Decrement a stock under a row lock; a deadlock is retried, a lock held
// past 2s is reported as ErrLockTimeout.
func ExampleDo() {
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	err = pessimistic.Do(context.Background(), db, func(ctx context.Context, tx *sql.Tx) error {
		var stock int
		q := "SELECT stock FROM goods WHERE id = $1 " + pessimistic.ForUpdate.Postgres()
		if err := tx.QueryRowContext(ctx, q, 1).Scan(&stock); err != nil {
			return err
		}
		if stock == 0 {
			return errors.New("sold out")
		}
		_, err := tx.ExecContext(ctx, "UPDATE goods SET stock = stock - 1 WHERE id = $1", 1)
		return err
	}, pessimistic.WithLockTimeout(2*time.Second))
	if errors.Is(err, pessimistic.ErrLockTimeout) {
		log.Print("busy, try later")
	}
}

func ExampleClause() {
	fmt.Println(pessimistic.ForUpdateSkipLocked.Postgres())
	fmt.Println(pessimistic.ForNoKeyUpdate.Postgres())
	fmt.Println(pessimistic.ForNoKeyUpdate.MySQL())
	// Output:
	// FOR UPDATE SKIP LOCKED
	// FOR NO KEY UPDATE
	// FOR UPDATE
}

// Lock a row inside the application's own transaction, which may already
// hold it: InTx joins the transaction instead of waiting for it.
func ExampleInTx() {
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	// … the application's own statements …
	err = pessimistic.InTx(ctx, tx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, "UPDATE goods SET stock = stock - 1 WHERE id = (SELECT id FROM goods WHERE id = $1 "+
			pessimistic.ForUpdate.Postgres()+") AND stock > 0", 1)
		return err
	}, pessimistic.WithLockTimeout(2*time.Second))
	if err != nil {
		log.Print(err) // fn's statements are rolled back; tx is still usable
		return
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}
