package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/dlockhq/dlock/internal/testenv"
)

// Bad input gets one clear line and a non-zero exit, never a panic.
func TestBadInput(t *testing.T) {
	if os.Getenv("SECKILL_MAIN") == "1" {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		// The service processes seckill load starts are this test too.
		serveCommand = func(args ...string) (*exec.Cmd, error) {
			cmd := exec.Command(self, "-test.run=^TestBadInput$")
			cmd.Env = append(os.Environ(), "SECKILL_ARGS="+strings.Join(args, " "))
			return cmd, nil
		}
		os.Args = append([]string{"seckill"}, strings.Fields(os.Getenv("SECKILL_ARGS"))...)
		main()
		os.Exit(0)
	}
	for args, want := range map[string]string{
		"run --strategy nope":                 `unknown strategy "nope"`,
		"run --stock 0":                       "--stock must be positive",
		"run --buyers -3":                     "--buyers must be positive",
		"run --db oracle":                     "--db must be postgres or mysql",
		"frobnicate":                          "usage: seckill run",
		"run --procs 0":                       "--procs must be positive",
		"run --stock 5 --strategy none extra": `unexpected argument "extra"`,
		"serve --db oracle":                   "--db must be postgres or mysql",
		"serve --strategy fast":               `unknown inventory strategy "fast"`,
		"serve --ttl 0s":                      "--ttl must be at least 1ms",
		"serve --per-user 0":                  "--per-user and --per-item must be positive",
		"serve extra":                         `unexpected argument "extra"`,
		"serve --redis nowhere":               "--redis must be host:port",
		"load --redis nowhere":                "--redis must be host:port",
		"load --buckets 0":                    "--buckets must be between 1 and 256",
		"load --rate 0":                       "must be positive",
		"load --strategy atomic,nope":         `unknown inventory strategy "nope"`,
		"load --procs 99":                     "at most 16 service processes",
		"load --duration 2s --kill-after 5s":  "--kill-after must be within --duration",
		"load --procs 1 --kill-after 1s":      "--kill-after needs --procs 2 or more",
		"load --rate 100000 --duration 1h":    "over 10 million requests",
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBadInput$")
		cmd.Env = append(os.Environ(), "SECKILL_MAIN=1", "SECKILL_ARGS="+args)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Errorf("%q exited 0", args)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], want) || strings.Contains(string(out), "panic") {
			t.Errorf("%q printed %q, want one line containing %q", args, out, want)
		}
	}
}

// An unreachable database is one line too.
func TestUnreachableServer(t *testing.T) {
	if os.Getenv("SECKILL_MAIN") == "1" {
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadInput$")
	cmd.Env = append(os.Environ(), "SECKILL_MAIN=1", "SECKILL_ARGS=run --stock 5", "DLOCK_PG_DSN=postgres://u:secret@127.0.0.1:1/none?connect_timeout=1")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "not reachable") || strings.Contains(string(out), "secret") {
		t.Fatalf("unreachable server: err=%v output %q (want a clear line, no password)", err, out)
	}
}

// A run whose output is not a terminal (a log, CI) prints each strategy's
// line once, with no carriage returns redrawing it.
func TestNoProgressOffTerminal(t *testing.T) {
	if os.Getenv("SECKILL_MAIN") == "1" {
		return
	}
	testenv.Postgres(t) // skips, or fails under DLOCK_REQUIRE_SERVICES, without a server
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadInput$")
	cmd.Env = append(os.Environ(), "SECKILL_MAIN=1", "SECKILL_ARGS=run --db postgres --strategy atomic,none --stock 50 --buyers 20 --migrate")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("seckill run: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "\r") {
		t.Fatalf("output off a terminal redraws lines with \\r:\n%q", out)
	}
	if n := strings.Count(string(out), "buyers done in"); n != 2 {
		t.Fatalf("%d final lines for 2 strategies:\n%s", n, out)
	}
}
