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
