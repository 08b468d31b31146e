package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlockhq/dlock/dlocktest"
)

// alive reports whether process pid runs (a zombie, dead but not yet
// reaped, does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}

// readPID waits for a pid the command writes to file.
func readPID(ctx context.Context, t *testing.T, file string) int {
	t.Helper()
	for ctx.Err() == nil {
		if b, err := os.ReadFile(file); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no pid in %s: %v", file, ctx.Err())
	return 0
}

// script is a shell command that starts a background child, writes its
// pid and its own, and waits (or, with exit, exits at once).
func script(dir string, wait bool) string {
	end := "wait"
	if !wait {
		end = "exit 0"
	}
	return `sleep 300 & echo $! > ` + dir + `/child.tmp && mv ` + dir + `/child.tmp ` + dir + `/child; echo $$ > ` + dir + `/sh.tmp && mv ` + dir + `/sh.tmp ` + dir + `/sh; ` + end
}

// SIGKILL of dlock run itself: the command and the children it started
// die with it, before the lock's TTL lets a second run in, on every
// backend.
func TestRunKilledTakesItsCommandWithIt(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for backend, u := range urls(t) {
		t.Run(backend, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			name, dir := dlocktest.Name(t), t.TempDir()
			const ttl = 3 * time.Second
			d := exec.Command(self, "run", "--url", u, "--ttl", ttl.String(), name, "--", "sh", "-c", script(dir, true))
			d.Env = append(os.Environ(), asDlock+"=1")
			if err := d.Start(); err != nil {
				t.Fatal(err)
			}
			child, sh := readPID(ctx, t, filepath.Join(dir, "child")), readPID(ctx, t, filepath.Join(dir, "sh"))
			if err := d.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			killed := time.Now()
			_ = d.Wait()
			for (alive(child) || alive(sh)) && time.Since(killed) < ttl {
				time.Sleep(10 * time.Millisecond)
			}
			if alive(child) || alive(sh) {
				syscall.Kill(child, syscall.SIGKILL)
				syscall.Kill(sh, syscall.SIGKILL)
				t.Fatalf("%v after dlock run was killed, its command (pid %d: %v) or the command's child (pid %d: %v) still runs", time.Since(killed), sh, alive(sh), child, alive(child))
			}
			gone := time.Since(killed)
			// The lock expires at its TTL: a second run gets it then.
			code, _, errOut := dlockCmd(ctx, "run", "--url", u, "--timeout", "20s", name, "--", "true")
			if code != 0 {
				t.Fatalf("a second run after the TTL: %d %q", code, errOut)
			}
			t.Logf("the command's group was gone %v after dlock run was killed; the TTL is %v", gone, ttl)
		})
	}
}

// A command that exits leaving a child behind: dlock run stops the child
// before it releases the lock, and exits with the command's status.
func TestRunStopsWhatTheCommandLeft(t *testing.T) {
	u := urls(t)["postgres"]
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	dir := t.TempDir()
	code, _, errOut := dlockCmd(ctx, "run", "--url", u, "--grace", "2s", dlocktest.Name(t), "--", "sh", "-c", script(dir, false))
	child := readPID(ctx, t, filepath.Join(dir, "child"))
	if alive(child) {
		syscall.Kill(child, syscall.SIGKILL)
		t.Fatalf("the command's child %d still runs after dlock run returned (%d %q)", child, code, errOut)
	}
	if code != 0 || !strings.Contains(errOut, "left processes") {
		t.Fatalf("dlock run: %d %q, want the command's status 0 and the stopped leftovers said", code, errOut)
	}
}
