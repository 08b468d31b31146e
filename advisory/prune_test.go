package advisory_test

import (
	"context"
	"testing"

	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Prune removes the rows of free names only; a pruned name that comes
// back gets a larger token.
func TestPrune(t *testing.T) {
	db := migrated(t, testenv.MySQL)
	ctx := context.Background()
	l := newLocker(t, db)
	free, held := dlocktest.Name(t)+".free", dlocktest.Name(t)+".held"
	first, err := l.Lock(ctx, free)
	if err != nil {
		t.Fatal(err)
	}
	first.Unlock(ctx)
	holding, err := l.Lock(ctx, held)
	if err != nil {
		t.Fatal(err)
	}
	defer holding.Unlock(ctx)
	if _, err := advisory.Prune(ctx, db); err != nil {
		t.Fatal(err)
	}
	count := func(name string) (n int) {
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM dlock_fences WHERE name = ?", name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if count(free) != 0 {
		t.Fatal("the free name's row survived Prune")
	}
	if count(held) != 1 {
		t.Fatal("Prune deleted a held name's row")
	}
	again, err := l.Lock(ctx, free)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Unlock(ctx)
	if again.Token() <= first.Token() {
		t.Fatalf("token %d after pruning, was %d", again.Token(), first.Token())
	}
	if n, err := advisory.Prune(ctx, migrated(t, testenv.Postgres)); n != 0 || err != nil {
		t.Fatalf("Prune on PostgreSQL: %d, %v", n, err)
	}
}
