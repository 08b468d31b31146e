package advisory

import (
	"context"
	"database/sql"
	"log/slog"
	"runtime"
	"testing"
	"time"
	"weak"
)

// warnMemoryFences asks once per *sql.DB, and forgets a *sql.DB the
// program dropped: its entry goes with it.
func TestFencesCheckedGoesWithDB(t *testing.T) {
	var key weak.Pointer[sql.DB]
	func() {
		// Nothing listens on port 1: the question fails at once, after
		// the entry is made.
		db, err := sql.Open("mysql", "root@tcp(127.0.0.1:1)/test?timeout=1s")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		key = weak.Make(db)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var asked int
		log := slog.New(slog.DiscardHandler)
		for range 2 {
			warnMemoryFences(ctx, db, log)
			if _, ok := fencesChecked.Load(key); ok {
				asked++
			}
		}
		if asked != 2 {
			t.Fatalf("the *sql.DB was recorded after %d of 2 questions, want both", asked)
		}
	}()
	for range 100 {
		runtime.GC()
		if _, ok := fencesChecked.Load(key); !ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the entry of a dropped *sql.DB is still there")
}
