package election_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/election"
	"github.com/dlockhq/dlock/memlock"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/tablelock"
)

// One process of many campaigns to run the billing loop; the term fences
// the loop's writes, and the loop stops when leadership ends. On the
// local PostgreSQL (make services); see Example_memlock for one that runs
// anywhere.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := migrations.Up(ctx, db); err != nil {
		log.Fatal(err)
	}
	locker, err := tablelock.New(db)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(ctx)

	e, err := election.New(locker, "example/billing")
	if err != nil {
		log.Fatal(err)
	}
	leader, err := e.Campaign(ctx, "node-1 10.0.0.7:8080")
	if err != nil {
		log.Fatal(err)
	}
	leader.Go(func(ctx context.Context) {
		// The leader's work: runs until ctx is cancelled (Resign, or the
		// lease lost), writing with leader.Term() as its fencing token.
		<-ctx.Done()
	})

	who, err := e.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", who.Value, who.Term == leader.Term())
	if err := leader.Resign(ctx); err != nil {
		log.Fatal(err)
	}
}

// The same on memlock's in-memory server, as a unit test would.
func Example_memlock() {
	ctx := context.Background()
	locker, err := memlock.NewLocker(memlock.NewServer())
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(ctx)
	e, err := election.New(locker, "billing")
	if err != nil {
		log.Fatal(err)
	}
	leader, err := e.Campaign(ctx, "node-1")
	if err != nil {
		log.Fatal(err)
	}
	who, err := e.Leader(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("leader:", who.Value, who.Term == leader.Term())
	if err := leader.Resign(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = e.Leader(ctx)
	fmt.Println(errors.Is(err, election.ErrNoLeader))
	// Output:
	// leader: node-1 true
	// true
}
