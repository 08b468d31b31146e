package optimistic_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/optimistic"
)

// On a Galera cluster two nodes may both apply an UPDATE … WHERE
// version = v; the second to commit fails certification (error 1213),
// which counts as a conflict, so Retry reads again and no unit is sold
// twice.
func TestGaleraSellsEachUnitOnce(t *testing.T) {
	dsns := testenv.GaleraDSNs(t)
	var dbs []*optimistic.Table
	first := testenv.Open(t, "mysql", dsns[0])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, q := range []string{"DROP TABLE IF EXISTS optimistic_galera", "CREATE TABLE optimistic_galera (id int PRIMARY KEY, stock int NOT NULL, version bigint NOT NULL)", "INSERT INTO optimistic_galera VALUES (1, 60, 1)"} {
		if _, err := first.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { first.ExecContext(context.Background(), "DROP TABLE IF EXISTS optimistic_galera") })
	pools := make([]interface {
		optimistic.Querier
		optimistic.Execer
	}, len(dsns))
	for i, dsn := range dsns {
		db := testenv.Open(t, "mysql", dsn)
		tbl, err := optimistic.NewTable(db, "optimistic_galera", "id", "version")
		if err != nil {
			t.Fatal(err)
		}
		dbs, pools[i] = append(dbs, tbl), db
	}
	var sold, conflicts atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := buyUntilSoldOut(ctx, dbs[w%len(dbs)], pools[w%len(dbs)], &sold, &conflicts); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if sold.Load() != 60 {
		t.Fatalf("%d units sold of 60", sold.Load())
	}
}
