package tablelock_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/tablelock"
)

// A release notifies the queued process on its own channel: the shared
// channel, which every listening process hears, carries nothing of it.

// listening is a session of db that listens on channel: what it
// receives for the lock name comes on the returned channel, until the
// test ends. Other tests' locks notify on the same channels.
func listening(t *testing.T, db *sql.DB, channel, name string) (pid uint32, got <-chan string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 16)
	ready := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = conn.Raw(func(dc any) error {
			pc := dc.(*stdlib.Conn).Conn()
			_, err := pc.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
			pid = pc.PgConn().PID()
			ready <- err
			for {
				n, err := pc.WaitForNotification(ctx)
				if err != nil {
					return err
				}
				if strings.HasSuffix(n.Payload, name) {
					out <- n.Payload
				}
			}
		})
		_ = conn.Close()
	}()
	if err := <-ready; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-done })
	return pid, out
}

// quiet fails the test if got receives anything within d.
func quiet(t *testing.T, got <-chan string, d time.Duration, what string) {
	t.Helper()
	select {
	case p := <-got:
		t.Fatalf("%s: %q", what, p)
	case <-time.After(d):
	}
}

// receive waits for the next payload on got.
func receive(t *testing.T, ctx context.Context, got <-chan string, what string) string {
	t.Helper()
	select {
	case p := <-got:
		return p
	case <-ctx.Done():
		t.Fatalf("%s: nothing received", what)
		return ""
	}
}

func TestQueueWakesOnItsOwnChannel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	admin := testenv.Postgres(t)
	_, shared := listening(t, admin, "dlock_locks", name)

	first := hold(t, ctx, name)
	next := waitFor(ctx, newLocker(t, process(t, nil), slowPoll), name)
	pid := queued(t, ctx, admin, name, 1)[0]
	_, own := listening(t, admin, fmt.Sprintf("dlock_locks_%d", pid), name)
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lease := <-next
	if lease == nil {
		t.Fatal("the queued process was not woken")
	}
	// The release granted the lock to the queued waiter, and told its
	// process so on the process's own channel.
	p := receive(t, ctx, own, "the process's own channel")
	g, ok := tablelock.ParseGrant(p)
	if !ok || int64(g.PID) != pid || g.Name != name || g.Owner != lease.Owner() || g.Token != lease.Token() {
		t.Fatalf("own channel: %q, want a grant to pid %d of %q to %q with token %d", p, pid, name, lease.Owner(), lease.Token())
	}
	quiet(t, shared, 200*time.Millisecond, "the shared channel carried a wake-up for one process")

	// With nobody queued, a release wakes every process: on the shared
	// channel, which this session does hear.
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if p := receive(t, ctx, shared, "the shared channel"); p != "0/"+name {
		t.Fatalf("shared channel: %q, want %q", p, "0/"+name)
	}
}

// A process of a version before own_channel listens on the shared
// channel alone; its queue row says so, and a release notifies it there.
func TestQueueWakesAnOlderProcessOnTheSharedChannel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	admin := testenv.Postgres(t)
	pid, shared := listening(t, admin, "dlock_locks", name)
	first := hold(t, ctx, name)
	if _, err := admin.ExecContext(ctx, `INSERT INTO dlock_waiters (name, pid, since, expires_at)
		VALUES ($1, $2, now(), now() + interval '1 minute')`, name, int64(pid)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.ExecContext(context.Background(), "DELETE FROM dlock_waiters WHERE name = $1", name)
	})
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if p, want := receive(t, ctx, shared, "the older process"), fmt.Sprintf("%d/%s", pid, name); p != want {
		t.Fatalf("shared channel: %q, want %q", p, want)
	}
}
