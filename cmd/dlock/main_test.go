package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	etcdlock "github.com/dlockhq/dlock/adapters/etcd"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/internal/testenv/etcdenv"
	"github.com/dlockhq/dlock/migrations"
)

// TestMain: the test binary is dlock run's supervisor as well (run
// starts this executable again to lead its command's group), and the
// dlock command itself when asAsDlock is set, for tests that kill it.
func TestMain(m *testing.M) {
	superviseIfAsked()
	if os.Getenv(asDlock) == "1" {
		os.Unsetenv(asDlock)
		main()
	}
	testenv.Main(m)
}

// asDlock makes the test binary run as the dlock command.
const asDlock = "DLOCK_TEST_AS_COMMAND"

// syncBuffer is a bytes.Buffer the command and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// dlockCmd runs the command line args and returns its status and output.
func dlockCmd(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut syncBuffer
	code = cli(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func etcdURL() string { return "etcd://" + strings.Join(etcdenv.Endpoints(), ",") + "/dlock-cmd" }

// urls are a URL of every backend the command takes.
func urls(t *testing.T) map[string]string {
	pg, err := url.Parse(testenv.DSN("pgx"))
	if err != nil {
		t.Fatal(err)
	}
	etcdenv.Client(t, etcdenv.Endpoints()) // fails or skips when it is missing
	return map[string]string{
		"postgres": pg.String(),
		"mysql":    "mysql://root@" + mysqlAddr(t) + "/test",
		"redis":    "redis://" + testenv.RedisAddr(t) + "/0",
		"zk":       "zk://" + strings.Join(testenv.ZKAddrs(t), ",") + "/dlock-cmd",
		"etcd":     etcdURL(),
	}
}

func mysqlAddr(t *testing.T) string {
	testenv.MySQL(t)
	return "127.0.0.1:3306"
}

// The command runs under the lock with the name and token in its
// environment, and dlock exits with its status; meanwhile inspect shows
// the holder, and a second run waits.
func TestRunUnderTheLock(t *testing.T) {
	for backend, u := range urls(t) {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			name := dlocktest.Name(t)
			dir := t.TempDir()
			started := dir + "/started"
			// The first run holds the lock until the test removes "go".
			if err := os.WriteFile(dir+"/go", nil, 0o600); err != nil {
				t.Fatal(err)
			}
			const why = "nightly report, started by cron"
			first := make(chan string, 1)
			go func() {
				code, out, errOut := dlockCmd(ctx, "run", "--url", u, "--ttl", "5s", "--payload", why, name, "--",
					"sh", "-c", `echo "$DLOCK_NAME $DLOCK_TOKEN" > `+started+`; while [ -e `+dir+`/go ]; do sleep 0.05; done; exit 7`)
				first <- strconv.Itoa(code) + "|" + out + "|" + errOut
			}()
			var env string
			for env == "" && ctx.Err() == nil {
				b, _ := os.ReadFile(started)
				env = strings.TrimSpace(string(b))
				time.Sleep(20 * time.Millisecond)
			}
			gotName, token, _ := strings.Cut(env, " ")
			if gotName != name || token == "" || token == "0" {
				t.Fatalf("the command's environment: %q, want the name %q and a token", env, name)
			}
			code, out, errOut := dlockCmd(ctx, "inspect", "--url", u, "--json", name)
			var h holder
			if code != 0 || json.Unmarshal([]byte(out), &h) != nil || !h.Held || strconv.FormatUint(h.Token, 10) != token || h.Payload != why {
				t.Fatalf("inspect while run holds: %d %q %q, want held with token %s and payload %q", code, out, errOut, token, why)
			}
			if knowsAge := backend != "etcd"; knowsAge != (h.AgeMS > 0) {
				t.Fatalf("inspect while run holds: age %dms, want it known on %s: %v", h.AgeMS, backend, knowsAge)
			}
			if backend != "advisory" {
				code, out, errOut = dlockCmd(ctx, "ls", "--url", u, "--json", name[:len(name)-4])
				h = holder{}
				if code != 0 || json.Unmarshal([]byte(out), &h) != nil || h.Name != name || strconv.FormatUint(h.Token, 10) != token || h.Payload != why {
					t.Fatalf("ls while run holds: %d %q %q, want %s with token %s and payload %q", code, out, errOut, name, token, why)
				}
				if countsWaiters := backend != "mysql"; countsWaiters != (h.Waiters != nil) {
					t.Fatalf("ls while run holds: %q, want waiters counted on %s: %v", out, backend, countsWaiters)
				}
				if code, out, _ = dlockCmd(ctx, "ls", "--url", u, name[:len(name)-4]); !strings.Contains(out, strconv.Quote(why)) {
					t.Fatalf("ls while run holds: %d %q, want the payload in the line", code, out)
				}
			}
			// A second run with a short timeout does not get the lock.
			code, _, errOut = dlockCmd(ctx, "run", "--url", u, "--timeout", "300ms", name, "--", "true")
			if code != exitFailed || !strings.Contains(errOut, "not acquired") {
				t.Fatalf("second run while held: %d %q, want status 1, not acquired", code, errOut)
			}
			os.Remove(dir + "/go")
			if res := <-first; !strings.HasPrefix(res, "7|") {
				t.Fatalf("first run: %q, want the command's status 7", res)
			}
			code, out, _ = dlockCmd(ctx, "inspect", "--url", u, name)
			if code != 0 || !strings.Contains(out, "is free") {
				t.Fatalf("inspect after run: %d %q, want free", code, out)
			}
		})
	}
}

// When the lease is lost, the command and its children are stopped
// (SIGTERM to the group) and dlock exits non-zero saying so.
func TestRunStopsTheCommandWhenTheLeaseIsLost(t *testing.T) {
	c := etcdenv.Client(t, etcdenv.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name, dir := dlocktest.Name(t), t.TempDir()
	done := make(chan [3]string, 1)
	go func() {
		code, out, errOut := dlockCmd(ctx, "run", "--url", etcdURL(), "--ttl", "2s", "--grace", "5s", name, "--", "sh", "-c", script(dir, true))
		done <- [3]string{strconv.Itoa(code), out, errOut}
	}()
	child := readPID(ctx, t, filepath.Join(dir, "child"))
	l, err := etcdlock.New(c, "dlock-cmd")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	// An operator deletes the holder's key.
	for {
		h, ok, err := l.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			resp, err := c.Delete(ctx, "dlock-cmd/lock/"+name+"/", clientv3.WithPrefix())
			if err != nil || resp.Deleted != 1 {
				t.Fatalf("deleting %s's key (token %d): %v", name, h.Token, err)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	deleted := time.Now()
	res := <-done
	if res[0] != "143" || !strings.Contains(res[2], "lease") || !strings.Contains(res[2], "lost") {
		t.Fatalf("run whose lease was lost: status %s, stderr %q; want 143 (SIGTERM) and the loss said", res[0], res[2])
	}
	if waited := time.Since(deleted); waited > 2*time.Second {
		t.Errorf("the command was stopped %v after the key went, want within a TTL", waited)
	}
	if alive(child) {
		syscall.Kill(child, syscall.SIGKILL)
		t.Errorf("the command's own child %d still runs after the lease was lost", child)
	}
}

func TestMigrateAndPrune(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	fresh, err := url.Parse(testenv.FreshDSN(t, "pgx"))
	if err != nil {
		t.Fatal(err)
	}
	u := fresh.String()
	code, out, _ := dlockCmd(ctx, "migrate", "--url", u, "status")
	if code != 0 || !strings.Contains(out, "version 0 of") {
		t.Fatalf("migrate status on a fresh database: %d %q", code, out)
	}
	var table *string
	if err := testenv.Open(t, "pgx", u).QueryRowContext(ctx, "SELECT to_regclass($1)::text", migrations.TableName).Scan(&table); err != nil || table != nil {
		t.Fatalf("migrate status wrote the version table %v (%v): status must not write", table, err)
	}
	code, out, errOut := dlockCmd(ctx, "migrate", "--url", u, "--json", "up")
	var s schema
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil || s.Version != s.Latest || s.Latest == 0 || s.Dirty {
		t.Fatalf("migrate up: %d %q %q", code, out, errOut)
	}
	code, out, errOut = dlockCmd(ctx, "prune", "--url", u, "--idle", "1s")
	if code != 0 || !strings.HasPrefix(out, "deleted 0 idle rows") {
		t.Fatalf("prune: %d %q %q", code, out, errOut)
	}
	code, _, errOut = dlockCmd(ctx, "prune", "--url", "redis://"+testenv.RedisAddr(t))
	if code != exitUsage || !strings.Contains(errOut, "postgres:// and mysql://") {
		t.Fatalf("prune on redis: %d %q, want a usage error", code, errOut)
	}
}

// Bad input is one line on stderr and status 2, before any I/O: the URLs
// below name servers that do not exist.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage"},
		{[]string{"frobnicate", "x"}, "unknown subcommand"},
		{[]string{"inspect", "--url", "", "x"}, "no server"},
		{[]string{"inspect", "--url", "ftp://127.0.0.1:1/x", "x"}, "scheme"},
		{[]string{"inspect", "--url", "redis://127.0.0.1:1/0", ""}, dlock.ErrInvalidName.Error()},
		{[]string{"run", "--url", "redis://127.0.0.1:1/0", "x", "--"}, "no command"},
		{[]string{"inspect", "--url", "postgres://127.0.0.1:1/x", "--lock", "zookeeper", "x"}, "--lock"},
		{[]string{"migrate", "--url", "redis://127.0.0.1:1/0", "sideways"}, "postgres:// and mysql://"},
		{[]string{"run", "--url", "redis://127.0.0.1:1/0", "--payload", strings.Repeat("x", dlock.MaxPayloadLen+1), "x", "--", "true"}, "the limit is"},
		{[]string{"run", "--url", "redis://127.0.0.1:1/0", "--payload", "two\nlines", "x", "--", "true"}, "unprintable"},
	} {
		code, _, errOut := dlockCmd(ctx, c.args...)
		if code != exitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("dlock %q: %d %q, want status 2 and %q", c.args, code, errOut, c.want)
		}
	}
}

// release asks first, and takes the lock only on a yes: the holder's
// lease ends and a waiter gets the lock with a larger token.
func TestRelease(t *testing.T) {
	for backend, u := range urls(t) {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			name := dlocktest.Name(t)
			tgt, err := connect(settings{url: u, kind: "tablelock", ttl: 3 * time.Second}, os.Stderr)
			if err != nil {
				t.Fatal(err)
			}
			defer tgt.shutdown()
			held, err := tgt.locker.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			stdin = strings.NewReader("n\n")
			code, _, errOut := dlockCmd(ctx, "release", "--url", u, name)
			if code != exitUsage || !strings.Contains(errOut, "not released") {
				t.Fatalf("release answered no: %d %q", code, errOut)
			}
			select {
			case <-held.Done():
				t.Fatal("the lease ended though the release was declined")
			default:
			}
			stdin = strings.NewReader("y\n")
			code, out, errOut := dlockCmd(ctx, "release", "--url", u, "--json", name)
			var r released
			if code != 0 || json.Unmarshal([]byte(out), &r) != nil || !r.Released || r.Token != held.Token() || r.Owner != held.Owner() {
				t.Fatalf("release answered yes: %d %q %q, want the holder (token %d) evicted", code, out, errOut, held.Token())
			}
			if !strings.Contains(errOut, "ForceRelease") {
				t.Errorf("the eviction was not logged: %q", errOut)
			}
			select {
			case <-held.Done():
			case <-time.After(3 * time.Second):
				t.Fatal("the evicted holder's lease is still open a TTL later")
			}
			code, out, _ = dlockCmd(ctx, "release", "--url", u, "--yes", name)
			if code != 0 || !strings.Contains(out, "is free") {
				t.Fatalf("release of a free name: %d %q", code, out)
			}
		})
	}
}

// migrate takes what a DBA expects of golang-migrate's CLI: up N, down
// N, version, force V; down without N is refused.
func TestMigrateSteps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	u := testenv.FreshDSN(t, "pgx")
	step := func(want string, args ...string) {
		t.Helper()
		code, out, errOut := dlockCmd(ctx, append([]string{"migrate", "--url", u}, args...)...)
		if code != 0 || strings.TrimSpace(out) != want {
			t.Fatalf("migrate %v: %d %q %q, want %q", args, code, out, errOut, want)
		}
	}
	step("0", "version")
	code, _, errOut := dlockCmd(ctx, "migrate", "--url", u, "up", "2")
	if code != 0 {
		t.Fatalf("migrate up 2: %d %q", code, errOut)
	}
	step("2", "version")
	code, _, errOut = dlockCmd(ctx, "migrate", "--url", u, "down", "1")
	if code != 0 {
		t.Fatalf("migrate down 1: %d %q", code, errOut)
	}
	step("1", "version")
	for _, bad := range [][]string{{"down"}, {"down", "0"}, {"up", "x"}, {"force"}, {"sideways"}} {
		if code, _, errOut := dlockCmd(ctx, append([]string{"migrate", "--url", u}, bad...)...); code != exitUsage || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("migrate %v: %d %q, want one line and status %d", bad, code, errOut, exitUsage)
		}
	}
	step("1", "version") // nothing ran
	code, out, errOut := dlockCmd(ctx, "migrate", "--url", u, "force", "3")
	if code != 0 || !strings.Contains(out, "version 3 of") {
		t.Fatalf("migrate force 3: %d %q %q", code, out, errOut)
	}
	code, out, errOut = dlockCmd(ctx, "migrate", "--url", u, "force", "1")
	if code != 0 || !strings.Contains(out, "version 1 of") {
		t.Fatalf("migrate force 1: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := dlockCmd(ctx, "migrate", "--url", u, "up"); code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate up after force: %d %q %q", code, out, errOut)
	}
}
