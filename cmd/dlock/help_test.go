package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// -h, --help and help [SUB] print the usage on stdout and exit 0, before
// anything else (no --url needed); help of an unknown subcommand is a
// usage error.
func TestHelp(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, "dlock ls"},
		{[]string{"--help"}, "dlock ls"},
		{[]string{"-help"}, "dlock ls"},
		{[]string{"help"}, "dlock ls"},
		{[]string{"help", "run"}, "--grace"},
		{[]string{"inspect", "-h"}, "dlock inspect"},
		{[]string{"ls", "nu-", "--help"}, "-limit"},
		{[]string{"run", "--help", "x", "--", "true"}, "dlock run"},
	} {
		code, out, errOut := dlockCmd(ctx, c.args...)
		if code != 0 || !strings.Contains(out, c.want) || errOut != "" {
			t.Errorf("dlock %q: %d, stdout %q, stderr %q; want 0 and %q on stdout", c.args, code, out, errOut, c.want)
		}
	}
	if code, _, _ := dlockCmd(ctx, "help", "frobnicate"); code != exitUsage {
		t.Errorf("dlock help frobnicate: %d, want %d", code, exitUsage)
	}
	// A command's own -h after run's -- is the command's.
	if w, ok := wantsHelp([]string{"run", "x", "--", "grep", "-h"}); ok {
		t.Errorf("wantsHelp(run x -- grep -h) = %q, true: -h after -- is the command's", w)
	}
}

// No output of any subcommand carries a URL's password, whatever fails:
// URLs that do not parse, schemes dlock does not take, servers that do
// not answer (port 1), from --url or DLOCK_URL.
func TestNoSecretInOutput(t *testing.T) {
	const secret = "S3CRETpw"
	ctx, cancel := context.WithTimeout(context.Background(), 20_000_000_000)
	defer cancel()
	urls := []string{
		"postgres://user:" + secret + "@127.0.0.1:5432/db%zz",
		"postgres://user:" + secret + "@127.0.0.1:port/db",
		"postgres://user:" + secret + "@[::1/db",
		"mysql://user:" + secret + "@127.0.0.1:1/db%zz",
		"mysql://user:" + secret + "@127.0.0.1:1/db",
		"redis://user:" + secret + "@127.0.0.1:1/x",
		"redis://:" + secret + "@127.0.0.1:1/0?dial_timeout=bogus",
		"ftp://user:" + secret + "@127.0.0.1:1/x",
		"etcd://user:" + secret + "@127.0.0.1:1%zz/x",
		"zk://user:" + secret + "@127.0.0.1:1%zz/x",
		"postgres://user:p%40" + secret + "@127.0.0.1:1/db%zz",
	}
	for _, u := range urls {
		for _, args := range [][]string{
			{"inspect", "--url", u, "x"},
			{"inspect", "--url=" + u, "x"},
			{"ls", "--timeout", "1s", "--url", u},
		} {
			code, out, errOut := dlockCmd(ctx, args...)
			if code == 0 {
				t.Errorf("dlock %q succeeded", args)
			}
			if strings.Contains(out+errOut, secret) {
				t.Errorf("dlock %q printed the password: stdout %q, stderr %q", args, out, errOut)
			}
		}
	}
	t.Setenv("DLOCK_URL", urls[0])
	if _, out, errOut := dlockCmd(ctx, "inspect", "x"); strings.Contains(out+errOut, secret) {
		t.Errorf("dlock inspect with DLOCK_URL printed the password: stdout %q, stderr %q", out, errOut)
	}
}

// ls, inspect, migrate and prune return within --timeout on a server that
// does not answer: here etcd, whose client waits for a connection as long
// as ctx allows, on a port nobody listens on.
func TestBoundedOnUnreachableServer(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{
		{"ls", "--timeout", "1s", "--url", "etcd://127.0.0.1:1/x"},
		{"inspect", "--timeout", "1s", "--url", "etcd://127.0.0.1:1/x", "name"},
	} {
		start := time.Now()
		code, _, errOut := dlockCmd(ctx, args...)
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("dlock %q took %v with --timeout 1s", args, took)
		}
		if code == 0 || !strings.Contains(errOut, "did not answer within 1s") || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("dlock %q: %d %q, want a failure saying the server did not answer within 1s, in one line", args, code, errOut)
		}
	}
}

// Every subcommand returns within its bound, in one line and non-zero,
// on a frozen server of each backend: a proxy that accepts connections
// and passes nothing. ls and inspect end at --timeout, release and watch
// at --timeout per request, run at the bound of its first request
// (10 s).
func TestBoundedOnFrozenServer(t *testing.T) {
	for backend, raw := range urls(t) {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			u, err := url.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			host, _, _ := strings.Cut(u.Host, ",")
			proxy := testenv.NewProxy(t, host)
			proxy.Blackhole()
			u.Host = proxy.Addr()
			frozen := u.String()
			for _, c := range []struct {
				args  []string
				bound time.Duration
			}{
				{[]string{"ls", "--timeout", "1s"}, time.Second},
				{[]string{"inspect", "--timeout", "1s", "name"}, time.Second},
				{[]string{"release", "--yes", "--timeout", "1s", "name"}, time.Second},
				{[]string{"watch", "--timeout", "1s", "name"}, time.Second},
				{[]string{"run", "name", "--", "true"}, defaultRequestTimeout},
			} {
				args := append(c.args[:1:1], append([]string{"--url", frozen}, c.args[1:]...)...)
				start := time.Now()
				code, _, errOut := dlockCmd(context.Background(), args...)
				took := time.Since(start)
				t.Logf("dlock %s on a frozen %s: %v", c.args[0], backend, took.Round(time.Millisecond))
				if took > c.bound+2*time.Second {
					t.Errorf("dlock %s on a frozen %s took %v, bound %v", c.args[0], backend, took, c.bound)
				}
				if code == 0 || !strings.Contains(errOut, "did not answer within") || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
					t.Errorf("dlock %s on a frozen %s: %d %q, want a failure saying the server did not answer, in one line", c.args[0], backend, code, errOut)
				}
			}
		})
	}
}

// Flags may follow the arguments; after "--", everything is run's
// command, flags included.
func TestFlagsAfterArguments(t *testing.T) {
	u := urls(t)["postgres"]
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	code, out, errOut := dlockCmd(ctx, "run", name, "--url", u, "--ttl", "5s", "--", "echo", "--ttl", "x")
	if code != 0 || strings.TrimSpace(out) != "--ttl x" {
		t.Fatalf("run NAME --url U --ttl 5s -- echo --ttl x: %d %q %q, want the command's own --ttl", code, out, errOut)
	}
	code, out, errOut = dlockCmd(ctx, "ls", name, "--json", "--url", u)
	if code != 0 || strings.Contains(errOut, "usage") || out != "" {
		t.Fatalf("ls PREFIX --json --url U: %d %q %q, want nothing held, as JSON lines", code, out, errOut)
	}
	code, out, _ = dlockCmd(ctx, "ls", name, "--url", u)
	if code != 0 || !strings.Contains(out, "no lock is held under") {
		t.Fatalf("ls PREFIX --url U: %d %q", code, out)
	}
}

// ls prints an aligned table with a header, one row per hold.
func TestListTable(t *testing.T) {
	var b strings.Builder
	held := []dlock.Held{
		{Name: "a", Holder: dlock.Holder{Owner: "o1", Token: 7, TTL: 2 * time.Second, Age: time.Second, Payload: "nightly"}, Waiters: 3},
		{Name: "longer/name", Holder: dlock.Holder{Owner: "o2", Token: 12345, TTL: time.Second}, Waiters: dlock.UnknownWaiters},
	}
	if err := table(&b, "", held); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME ") {
		t.Fatalf("table:\n%s", b.String())
	}
	col := strings.Index(lines[0], "OWNER")
	for _, l := range lines[1:] {
		if len(l) <= col || l[col-1] != ' ' || l[col] == ' ' {
			t.Fatalf("OWNER column not aligned at %d:\n%s", col, b.String())
		}
	}
	if !strings.Contains(lines[1], `"nightly"`) || !strings.Contains(lines[1], " 3 ") || !strings.Contains(lines[2], " - ") || !strings.Contains(lines[2], " ? ") {
		t.Fatalf("table rows:\n%s", b.String())
	}
}
