// Command handoff shows a tablelock passed between processes: it starts
// two copies of itself that take turns holding one lock on PostgreSQL and
// print each fencing token they get. Tokens strictly increase across the
// two processes, which is what lets a protected resource refuse a holder
// that lost its lease.
//
//	go run ./cmd/handoff [-dsn postgres://…] [-rounds 5]
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/tablelock"
)

func main() {
	dsn := flag.String("dsn", envOr("DLOCK_PG_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"), "PostgreSQL DSN")
	rounds := flag.Int("rounds", 5, "turns per process")
	worker := flag.String("worker", "", "run as the named worker (internal)")
	flag.Parse()
	if *rounds <= 0 {
		fail(fmt.Errorf("-rounds must be positive, got %d", *rounds))
	}
	if *worker != "" {
		fail(work(*dsn, *worker, *rounds))
		return
	}
	fail(run(*dsn, *rounds))
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "handoff:", err)
		os.Exit(1)
	}
}

// run migrates the schema and starts two worker processes.
func run(dsn string, rounds int) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := migrations.Up(ctx, db); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, name := range []string{"process-A", "process-B"} {
		cmd := exec.Command(self, "-dsn", dsn, "-rounds", fmt.Sprint(rounds), "-worker", name)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cmd.Run()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// work takes the lock rounds times, holding it briefly each time.
func work(dsn, name string, rounds int) error {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	l, err := tablelock.New(db, dlock.WithOwner(fmt.Sprintf("%s(pid %d)", name, os.Getpid())))
	if err != nil {
		return err
	}
	ctx := context.Background()
	defer l.Close(ctx)
	for range rounds {
		lease, err := l.Lock(ctx, "handoff-demo")
		if err != nil {
			return err
		}
		fmt.Printf("%s  %-24s holds the lock, token %d\n", time.Now().Format("15:04:05.000"), lease.Owner(), lease.Token())
		time.Sleep(100 * time.Millisecond)
		if err := lease.Unlock(ctx); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}
