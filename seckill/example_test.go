package seckill_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/seckill"
)

// A flash sale of 100 units to 1,000 users, 64 at a time, under the lock
// table: the registry builds the strategy and the one Locker its buyers
// share.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	entry, _ := seckill.Lookup("tablelock")
	s, err := entry.New(seckill.Servers{DB: db})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)
	const goods = 1
	if err := seckill.Reset(ctx, db, s, goods, 100); err != nil {
		log.Fatal(err)
	}
	res := seckill.Sell(ctx, s, goods, seckill.Users(1, 1000), 64, nil)
	fmt.Println(res.Orders, "orders,", res.SoldOut, "told sold out")
}
