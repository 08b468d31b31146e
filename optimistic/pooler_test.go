package optimistic_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/optimistic"
)

// Through PgBouncer's transaction pooling, under the pgx query modes a
// pooler lets through, each unit is sold once: every Get and Update is
// one statement. pgx's default mode is refused at first use, in one line.
func TestThroughPgBouncer(t *testing.T) {
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			db, tbl := goodsIn(t, testenv.Open(t, "pgx", testenv.FreshPgBouncerDSN(t, "transaction", mode)), "pgx", 60)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var sold, conflicts atomic.Int32
			var wg sync.WaitGroup
			for range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := buyUntilSoldOut(ctx, tbl, db, &sold, &conflicts); err != nil {
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if sold.Load() != 60 {
				t.Fatalf("%d units sold of 60", sold.Load())
			}
			t.Logf("%d conflicts retried", conflicts.Load())
		})
	}
	t.Run("default", func(t *testing.T) {
		db := testenv.Open(t, "pgx", testenv.PgBouncerDSN(t, "transaction", ""))
		tbl, err := optimistic.NewTable(db, "optimistic_never_made", "id", "version")
		if err != nil {
			t.Fatal(err)
		}
		var stock int
		_, err = tbl.Get(context.Background(), db, 1, []string{"stock"}, &stock)
		if !errors.Is(err, sqldialect.ErrPooledStatements) || strings.Contains(err.Error(), "\n") {
			t.Fatalf("Get through a pooler with named statements: %v, want one line wrapping ErrPooledStatements", err)
		}
	})
}
