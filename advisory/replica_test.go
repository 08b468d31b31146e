package advisory_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/migrations"
)

// A MySQL replica that restarts keeps applying what the primary's locks
// write: on a server with a binary log the holder rows are InnoDB
// (migrations 000006 and 000007) and survive the restart. In a MEMORY
// table the restart emptied them, and the next lock's write to its name's
// row stopped replication (error 1032).
func TestReplicaRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := testenv.MariaDBReplicated(t)
	db := testenv.Open(t, "mysql", r.DSN)
	if err := migrations.Up(ctx, db); err != nil {
		t.Fatal(err)
	}
	l := newLocker(t, db)
	name := t.Name()
	cycle := func() {
		t.Helper()
		lease, err := l.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	r.WaitReplicated(t)
	r.Standby.Restart(t)
	cycle()
	r.WaitReplicated(t) // fails when replication stopped on an error
}

// A Locker warns, once, when dlock_fences is a MEMORY table on a server
// that writes a binary log, and only then.
func TestWarnsOfMemoryFences(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logged := testenv.MariaDBServerWith(t, "--log-bin=binlog", "--server-id=1").DSN
	unlogged := testenv.FreshDSN(t, "mysql")
	for _, c := range []struct {
		dsn, engine string
		want        int
	}{
		{logged, "InnoDB", 0},
		{logged, "MEMORY", 1},
		{unlogged, "MEMORY", 0},
	} {
		admin := testenv.Open(t, "mysql", c.dsn)
		if err := migrations.Up(ctx, admin); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ExecContext(ctx, "ALTER TABLE dlock_fences ENGINE="+c.engine); err != nil {
			t.Fatal(err)
		}
		var log testenv.Buffer
		db := testenv.Open(t, "mysql", c.dsn)
		for range 2 { // two Lockers on one pool
			l := newLocker(t, db, dlock.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
			for range 2 {
				lease, err := l.Lock(ctx, t.Name())
				if err != nil {
					t.Fatal(err)
				}
				if err := lease.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if n := lines(log.String(), "MEMORY table"); n != c.want {
			t.Errorf("%s with a binary log %v: %d warnings, want %d:\n%s", c.engine, c.dsn == logged, n, c.want, log.String())
		}
	}
}

// The question a Locker asks at its first use on MySQL (where
// dlock_fences keeps its rows) holds up no other call: with the link
// silent and the first Lock stuck in it, a Lock of another name on the
// same Locker returns by its own ctx.
func TestFirstUseOnSilentLink(t *testing.T) {
	migrated(t, testenv.MySQL)
	viaDB, proxy := testenv.ViaProxy(t, "mysql")
	defer proxy.Restore()
	l := newLocker(t, viaDB)
	name := t.Name()
	// A connection in the pool, so that the first Lock's question is
	// sent and its reply never comes (a new connection would give up its
	// handshake after the DSN's dial timeout).
	if err := viaDB.PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	first, cancel := context.WithCancel(context.Background())
	defer cancel()
	firstDone := make(chan error, 1)
	go func() {
		_, err := l.Lock(first, name)
		firstDone <- err
	}()
	time.Sleep(200 * time.Millisecond) // the first Lock asks, and waits
	ctx, cancelSecond := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancelSecond()
	second := make(chan error, 1)
	go func() { // another name: a Lock of the same one would queue behind the first in the process
		_, err := l.Lock(ctx, name+"/other")
		second <- err
	}()
	select {
	case err := <-second:
		if err == nil {
			t.Error("a Lock over a silent link took the lock")
		}
	case <-time.After(dlocktest.Timeout):
		t.Fatalf("a Lock with a 500ms deadline still waits after %v, behind the first Lock's question", dlocktest.Timeout)
	}
	cancel()
	<-firstDone
}
