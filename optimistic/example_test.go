package optimistic_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/go-sql-driver/mysql"

	"github.com/dlockhq/dlock/optimistic"
)

// Read, compute, write back if nobody changed the row meanwhile; retry on
// conflict.
func ExampleRetry() {
	db, err := sql.Open("mysql", "app@tcp(127.0.0.1:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	goods, err := optimistic.NewTable(db, "goods", "id", "version")
	if err != nil {
		log.Fatal(err)
	}
	err = optimistic.Retry(context.Background(), optimistic.DefaultPolicy, func(ctx context.Context) error {
		var stock int
		version, err := goods.Get(ctx, db, 1, []string{"stock"}, &stock)
		if err != nil || stock == 0 {
			return err
		}
		_, err = goods.Update(ctx, db, 1, version, map[string]any{"stock": stock - 1})
		return err // ErrConflict: Retry reads again
	})
	if err != nil {
		log.Print(err)
	}
}
