package inventory_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/inventory"
)

// galeraDatabases makes a database of the test's own on the Galera
// cluster, migrated, and opens it on each node.
func galeraDatabases(t *testing.T) []*sql.DB {
	t.Helper()
	dsns := testenv.GaleraDSNs(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "dlock_test_" + hex.EncodeToString(b[:])
	admin := testenv.Open(t, "mysql", dsns[0])
	ctx := context.Background()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE "+name); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	dbs := make([]*sql.DB, len(dsns))
	for i, dsn := range dsns {
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DBName = name
		// Causal reads (docs/deployments.md): a node answers only once
		// it has applied what the others committed before. The text
		// protocol: under prepared statements New refuses a Galera node
		// (TestGaleraRefusesPreparedStatements).
		cfg.Params = map[string]string{"wsrep_sync_wait": "7"}
		cfg.InterpolateParams = true
		dbs[i] = testenv.Open(t, "mysql", cfg.FormatDSN())
		dbs[i].SetMaxOpenConns(16)
	}
	if err := inventory.Migrate(ctx, dbs[0]); err != nil {
		t.Fatal(err)
	}
	return dbs
}

// TestGalera: stores on the three nodes of a Galera cluster sell one
// item's units: a certification conflict between nodes is retried, so
// each unit goes once, every request gets its outcome, and no user holds
// more than the limit.
func TestGalera(t *testing.T) {
	for _, st := range strategies {
		t.Run(st.String(), func(t *testing.T) {
			dbs := galeraDatabases(t)
			ctx := ctxT(t)
			var stores []*inventory.Store
			for _, db := range dbs {
				stores = append(stores, store(t, db, inventory.WithStrategy(st)))
			}
			if err := stores[0].AddItem(ctx, "hot", 100, 3); err != nil {
				t.Fatal(err)
			}
			var granted, refused atomic.Int64
			var mu sync.Mutex
			held := map[int64]int{}
			sem := make(chan struct{}, 16)
			var wg sync.WaitGroup
			for i := range 400 {
				user := int64(i%80 + 1) // five requests each: the limit of 3 binds
				wg.Add(1)
				sem <- struct{}{}
				go func() {
					defer wg.Done()
					defer func() { <-sem }()
					res, err := stores[i%len(stores)].Reserve(ctx, fmt.Sprint("r", i), user, "hot", 1)
					switch {
					case err == nil:
						granted.Add(1)
						mu.Lock()
						held[user] += res.Qty
						mu.Unlock()
					case errors.Is(err, inventory.ErrSoldOut) || errors.Is(err, inventory.ErrOverLimit):
						refused.Add(1)
					default:
						t.Errorf("request %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			for u, n := range held {
				if n > 3 {
					t.Errorf("user %d holds %d units, over the limit of 3", u, n)
				}
			}
			it, err := stores[1].Item(ctx, "hot")
			if err != nil {
				t.Fatal(err)
			}
			balanced(t, it)
			var rows int64
			if err := dbs[2].QueryRowContext(ctx, "SELECT count(*) FROM inventory_reservations WHERE sku = 'hot' AND state = 'reserved'").Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if granted.Load() != 100 || it.Reserved != 100 || rows != 100 {
				t.Errorf("%d granted, item reserved %d, %d reservation rows; want 100 each (%d refused)", granted.Load(), it.Reserved, rows, refused.Load())
			}
		})
	}
}

// Under go-sql-driver/mysql's prepared statements (its default), New
// refuses a Galera node in one line that names the fix: reservations
// aborted by another node's commit could keep part of their writes.
func TestGaleraRefusesPreparedStatements(t *testing.T) {
	db := testenv.Open(t, "mysql", testenv.GaleraDSNs(t)[0])
	_, err := inventory.New(db)
	if !errors.Is(err, inventory.ErrGaleraPrepared) || !strings.Contains(err.Error(), "interpolateParams=true") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("New on a Galera node under prepared statements: %v, want one line wrapping ErrGaleraPrepared", err)
	}
}
