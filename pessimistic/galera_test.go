package pessimistic_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/pessimistic"
)

// galeraTable makes table name(id int primary key, v int) with row 1 on a
// 3-node Galera cluster, and returns a pool on each node.
func galeraTable(t *testing.T, name string) []*sql.DB {
	t.Helper()
	var dbs []*sql.DB
	for _, dsn := range testenv.GaleraDSNs(t) {
		// The text protocol: under prepared statements Do refuses a
		// Galera node (TestGaleraRefusesPreparedStatements).
		dbs = append(dbs, testenv.Open(t, "mysql", dsn+"&interpolateParams=true"))
	}
	ctx := context.Background()
	for _, q := range []string{"DROP TABLE IF EXISTS " + name, "CREATE TABLE " + name + " (id int PRIMARY KEY, v int NOT NULL)", "INSERT INTO " + name + " VALUES (1, 0)"} {
		if _, err := dbs[0].ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { dbs[0].ExecContext(context.Background(), "DROP TABLE IF EXISTS "+name) })
	return dbs
}

// incrementConcurrently runs workers goroutines, worker w on dbs[w%n],
// each adding 1 to table's row 1 each times in Do, by a read FOR UPDATE
// and a write (ph is the dialect's placeholder), and returns the first
// error.
func incrementConcurrently(ctx context.Context, dbs []*sql.DB, table, ph string, workers, each int, opts ...pessimistic.Option) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := pessimistic.Do(ctx, dbs[w%len(dbs)], func(ctx context.Context, tx *sql.Tx) error {
					var v int
					if err := tx.QueryRowContext(ctx, "SELECT v FROM "+table+" WHERE id = 1 FOR UPDATE").Scan(&v); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, "UPDATE "+table+" SET v = "+ph+" WHERE id = 1", v+1)
					return err
				}, opts...)
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// On a Galera cluster SELECT … FOR UPDATE locks the row on its own node
// only; a transaction on another node that wrote it first makes this
// one's commit fail certification (error 1213), which Do retries, so no
// increment is lost.
func TestGaleraIncrementsAcrossNodes(t *testing.T) {
	table := "pessimistic_" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "_"))
	dbs := galeraTable(t, table)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const workers, each = 6, 10
	if err := incrementConcurrently(ctx, dbs, table, "?", workers, each, pessimistic.WithMaxAttempts(1000)); err != nil {
		t.Fatal(err)
	}
	var v int
	// wsrep_sync_wait: the read waits until node 2 applied every write.
	causal := testenv.Open(t, "mysql", testenv.GaleraDSNs(t)[1]+"&wsrep_sync_wait=1")
	if err := causal.QueryRowContext(ctx, "SELECT v FROM "+table+" WHERE id = 1").Scan(&v); err != nil || v != workers*each {
		t.Fatalf("v = %d (err %v) on node 2, want %d", v, err, workers*each)
	}
}

// A transaction whose first statement has arguments, on every node at
// once: each commits whole or not at all. (Under prepared statements a
// transaction aborted by another node's commit went on without its
// error: its later statements committed alone, and increments were lost,
// in every run.)
func TestGaleraTransactionsAllOrNothing(t *testing.T) {
	dbs := galeraTable(t, "pessimistic_all_or_nothing")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := dbs[0].ExecContext(ctx, "INSERT INTO pessimistic_all_or_nothing VALUES (2, 0)"); err != nil {
		t.Fatal(err)
	}
	const workers, each = 24, 40
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				err := pessimistic.Do(ctx, dbs[w%len(dbs)], func(ctx context.Context, tx *sql.Tx) error {
					if _, err := tx.ExecContext(ctx, "UPDATE pessimistic_all_or_nothing SET v = v + ? WHERE id = 2", 1); err != nil {
						return err
					}
					var v int
					if err := tx.QueryRowContext(ctx, "SELECT v FROM pessimistic_all_or_nothing WHERE id = ? FOR UPDATE", 1).Scan(&v); err != nil {
						return err
					}
					_, err := tx.ExecContext(ctx, "UPDATE pessimistic_all_or_nothing SET v = ? WHERE id = 1", v+1)
					return err
				}, pessimistic.WithMaxAttempts(1000))
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	causal := testenv.Open(t, "mysql", testenv.GaleraDSNs(t)[2]+"&wsrep_sync_wait=1")
	var v, w int
	if err := causal.QueryRowContext(ctx, "SELECT (SELECT v FROM pessimistic_all_or_nothing WHERE id = 1), (SELECT v FROM pessimistic_all_or_nothing WHERE id = 2)").Scan(&v, &w); err != nil {
		t.Fatal(err)
	}
	if v != workers*each || w != workers*each {
		t.Fatalf("row 1 = %d, row 2 = %d, want %d each", v, w, workers*each)
	}
}

// Under go-sql-driver/mysql's prepared statements (its default), Do
// refuses a Galera node before any transaction, in one line that names
// the fix.
func TestGaleraRefusesPreparedStatements(t *testing.T) {
	db := testenv.Open(t, "mysql", testenv.GaleraDSNs(t)[0])
	ran := false
	err := pessimistic.Do(context.Background(), db, func(context.Context, *sql.Tx) error { ran = true; return nil })
	if !errors.Is(err, pessimistic.ErrGaleraPrepared) || !strings.Contains(err.Error(), "interpolateParams=true") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Do on a Galera node under prepared statements: %v, want one line wrapping ErrGaleraPrepared", err)
	}
	if ran {
		t.Fatal("Do ran fn before refusing")
	}
}
