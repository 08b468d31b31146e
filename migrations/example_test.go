package migrations_test

import (
	"context"
	"database/sql"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/migrations"
)

// Up brings dlock's tables up to date at start-up, for teams that apply
// migrations from the application rather than with the migrate CLI.
func ExampleUp() {
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	if err := migrations.Up(context.Background(), db); err != nil {
		log.Fatal(err)
	}
}
