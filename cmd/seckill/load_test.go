package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// loadRun runs seckill load with args and returns its JSON report.
func loadRun(t *testing.T, args string) []loadRow {
	t.Helper()
	return loadStart(args)(t)
}

// loadStart starts seckill load with args; the function it returns waits
// for the JSON report (on the test's goroutine).
func loadStart(args string) func(t *testing.T) []loadRow {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadInput$")
	cmd.Env = append(os.Environ(), "SECKILL_MAIN=1", "SECKILL_ARGS="+args)
	cmd.Stderr = os.Stderr
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := cmd.Output()
		done <- result{out, err}
	}()
	return func(t *testing.T) []loadRow {
		t.Helper()
		r := <-done
		if r.err != nil {
			t.Fatalf("seckill %s: %v\n%s", args, r.err, r.out)
		}
		var rows []loadRow
		if err := json.Unmarshal(r.out, &rows); err != nil {
			t.Fatalf("seckill %s: %v\n%s", args, err, r.out)
		}
		return rows
	}
}

// exactRow fails t unless the strategy's run left the inventory exact:
// balanced, nothing oversold or duplicated, no user over its limit, and
// every reservation answered 201 held by the database.
func exactRow(t *testing.T, r loadRow) {
	t.Helper()
	if !r.Balanced || r.Oversold != 0 || r.Duplicates != 0 || r.OverLimit != 0 || r.Lost != 0 {
		t.Errorf("%s: %+v: the inventory is not exact", r.Strategy, r)
	}
	if r.Orders == 0 || r.Requests == 0 {
		t.Errorf("%s: %+v: nothing was ordered", r.Strategy, r)
	}
}

// TestLoad: seckill load drives two seckill serve processes per strategy
// over HTTP, on both databases; every run leaves the inventory exact, and
// the chart shows every strategy.
func TestLoad(t *testing.T) {
	if os.Getenv("SECKILL_MAIN") == "1" {
		return
	}
	for _, db := range []string{"postgres", "mysql"} {
		t.Run(db, func(t *testing.T) {
			if db == "postgres" {
				testenv.Postgres(t)
			} else {
				testenv.MySQL(t)
			}
			testenv.RedisAddr(t) // the redis strategy's
			chart := filepath.Join(t.TempDir(), "load.svg")
			rows := loadRun(t, "load --db "+db+" --stock 100 --buyers 25 --procs 2 --rate 200 --duration 2s --conns 4 --migrate --json --chart "+chart)
			if len(rows) != 4 || rows[0].Strategy != "atomic" || rows[1].Strategy != "combining" || rows[2].Strategy != "redis" || rows[3].Strategy != "buckets" {
				t.Fatalf("rows %+v, want atomic, combining, redis and buckets", rows)
			}
			if c := rows[2].RedisCount; c == nil || *c != rows[2].Available {
				t.Errorf("redis: %+v: Redis's count after Reconcile is not the database's", rows[2])
			}
			for _, r := range rows {
				exactRow(t, r)
				if r.Errors != 0 || r.Unanswered != 0 {
					t.Errorf("%s: %+v: errors or reservations nobody was told of, with no fault", r.Strategy, r)
				}
				if int64(r.Orders) != r.Reserved {
					t.Errorf("%s: %d orders answered 201, %d units reserved", r.Strategy, r.Orders, r.Reserved)
				}
			}
			svg, err := os.ReadFile(chart)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), ">atomic<") || !strings.Contains(string(svg), ">combining<") || !strings.Contains(string(svg), ">redis<") || !strings.Contains(string(svg), ">buckets<") {
				t.Errorf("chart:\n%s", svg)
			}
		})
	}
}

// TestLoadKilledService: a service process is killed (SIGKILL) mid-sale,
// under each strategy;
// its clients get errors, and the inventory stays exact: every order
// answered 201 is in the database and is confirmed through the surviving
// process, no confirm is lost, and the units of reservations nobody was
// told of are counted as reserved (they expire by their TTL).
func TestLoadKilledService(t *testing.T) {
	if os.Getenv("SECKILL_MAIN") == "1" {
		return
	}
	testenv.Postgres(t)
	testenv.RedisAddr(t)
	rows := loadRun(t, "load --db postgres --strategy combining,atomic,redis,buckets --stock 300 --buyers 30 --procs 2 --rate 300 --duration 3s --kill-after 1s --conns 4 --confirm --migrate --json")
	if len(rows) != 4 {
		t.Fatalf("rows %+v, want four strategies'", rows)
	}
	for _, r := range rows {
		// The killed process's grants the database never heard of stay
		// out of Redis's count until they count as abandoned.
		if r.Strategy == "redis" && (r.RedisCount == nil || *r.RedisCount > r.Available) {
			t.Errorf("redis: %+v: Redis counts more than the database has", r)
		}
		exactRow(t, r)
		if r.Errors == 0 {
			t.Errorf("%s: %+v: no request failed; the kill came after the run?", r.Strategy, r)
		}
		// Every order was confirmed through the surviving process; what
		// is still reserved is the reservations nobody was told of.
		if r.Confirmed != r.Orders || r.ConfirmedLost != 0 || r.Sold != int64(r.Confirmed) || int64(r.Unanswered) != r.Reserved {
			t.Errorf("%s: %+v: want every order confirmed and sold, and only the unanswered reserved", r.Strategy, r)
		}
	}
}

// TestLoadDatabaseRestart: the database (a throwaway PostgreSQL server)
// crashes and restarts mid-sale; requests meanwhile fail, and afterwards
// the inventory is exact, every order answered 201 is in it and every
// confirm answered 200 is confirmed in it.
func TestLoadDatabaseRestart(t *testing.T) {
	if os.Getenv("SECKILL_MAIN") == "1" {
		return
	}
	srv := testenv.PostgresServer(t)
	t.Setenv("DLOCK_PG_DSN", srv.DSN)
	wait := loadStart("load --db postgres --strategy combining --stock 2000 --buyers 100 --procs 2 --rate 200 --duration 8s --conns 4 --confirm --migrate --json")
	// Restart once the sale is under way: orders are in the database.
	db := testenv.Open(t, "pgx", srv.DSN)
	dlocktest.Eventually(t, func() bool {
		var n int
		err := db.QueryRow("SELECT count(*) FROM inventory_reservations").Scan(&n)
		return err == nil && n >= 50 // the tables may not be there yet
	}, "orders in the database")
	db.Close()
	srv.Restart(t)
	rows := wait(t)
	for _, r := range rows {
		exactRow(t, r)
		// Every order was confirmed after the restart; what is still
		// reserved is the reservations nobody was told of.
		if r.Confirmed != r.Orders || r.ConfirmedLost != 0 || r.Sold != int64(r.Confirmed) || int64(r.Unanswered) != r.Reserved {
			t.Errorf("%s: %+v: want every order confirmed and sold, and only the unanswered reserved", r.Strategy, r)
		}
		if r.Errors == 0 {
			t.Errorf("%s: %+v: no request failed; the restart missed the sale", r.Strategy, r)
		}
		t.Logf("%s: %d requests, %d orders, %d errors across the restart", r.Strategy, r.Requests, r.Orders, r.Errors)
	}
}

// TestLoadRedisRestart: the redis strategy's Redis (a throwaway server
// without persistence) restarts empty mid-sale. The services rebuild the
// count from the database and sell on to the end; the inventory is
// exact, every order answered 201 and every confirm answered 200 is in
// the database, and after Reconcile Redis counts what the database has.
func TestLoadRedisRestart(t *testing.T) {
	if os.Getenv("SECKILL_MAIN") == "1" {
		return
	}
	db := testenv.Postgres(t)
	srv := testenv.RedisServers(t, 1)[0]
	held := func() int { // units held by the redis runs' items; 0 before the tables exist
		var n int
		_ = db.QueryRow("SELECT COALESCE(SUM(reserved + sold), 0) FROM inventory_items WHERE sku LIKE 'hot-redis-%'").Scan(&n)
		return n
	}
	before := held()
	wait := loadStart("load --db postgres --strategy redis --redis " + srv.Addr + " --stock 600 --buyers 100 --procs 2 --rate 200 --duration 6s --conns 4 --confirm --migrate --json")
	dlocktest.Eventually(t, func() bool { return held()-before >= 100 }, "orders in the database")
	srv.Restart(t)
	atRestart := held() - before
	rows := wait(t)
	if len(rows) != 1 {
		t.Fatalf("rows %+v, want the redis strategy's", rows)
	}
	r := rows[0]
	exactRow(t, r)
	if r.Confirmed != r.Orders || r.ConfirmedLost != 0 || r.Sold != int64(r.Confirmed) {
		t.Errorf("%+v: want every order confirmed and sold", r)
	}
	if r.Sold+r.Reserved <= int64(atRestart) {
		t.Errorf("%+v: nothing sold after the restart (%d units held then)", r, atRestart)
	}
	if r.RedisCount == nil || *r.RedisCount != r.Available {
		t.Errorf("%+v: Redis's count after Reconcile is not the database's %d", r, r.Available)
	}
	t.Logf("%d requests, %d orders, %d errors; %d units held at the restart", r.Requests, r.Orders, r.Errors, atRestart)
}
