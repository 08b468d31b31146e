package inventory_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/inventory"
)

// A buyer reserves two units, pays and confirms; a retry of the same
// request returns the same reservation.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := inventory.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	s, err := inventory.New(db) // the combining strategy
	if err != nil {
		log.Fatal(err)
	}
	if err := s.AddItem(ctx, "phone-128gb", 10000, 2); err != nil {
		log.Fatal(err)
	}
	res, err := s.Reserve(ctx, "order-7f3a", 42, "phone-128gb", 2)
	switch {
	case errors.Is(err, inventory.ErrSoldOut), errors.Is(err, inventory.ErrOverLimit):
		fmt.Println("rejected:", err)
		return
	case err != nil:
		log.Fatal(err) // unknown outcome: retry with the same request id
	}
	again, _ := s.Reserve(ctx, "order-7f3a", 42, "phone-128gb", 2) // a retry

	fmt.Println(again.ID == res.ID)
	if _, err := s.Confirm(ctx, res.ID); err != nil {
		log.Fatal(err)
	}
}
