// Package subproc runs the current test again in a child process, for
// suites whose faults need a process of their own (SIGSTOP, SIGKILL): the
// child runs the same test, finds its role in its environment, and talks
// to its parent in lines on stdout.
package subproc

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proc is a child process running the current test.
type Proc struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr *Buffer
	exited chan struct{}
}

// Start runs t's test again in a child process, with env added to its
// environment, and registers its end (SIGKILL) with t. The child's
// stdout lines that start with prefix reach Lines, without it.
func Start(t testing.TB, prefix string, env ...string) *Proc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", Pattern(t.Name()), "-test.count=1", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &Proc{cmd: cmd, lines: make(chan string, 1024), stderr: &Buffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				p.lines <- line
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("child process stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// Pattern is the -test.run pattern that runs exactly the test (or
// subtest) called name.
func Pattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// Next returns the child's next line, failing t if none comes within d.
func (p *Proc) Next(t testing.TB, d time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("the child process ended its output; stderr:\n%s", p.stderr.String())
		}
		return l
	case <-time.After(d):
		t.Fatalf("no line from the child process within %v; stderr:\n%s", d, p.stderr.String())
	}
	return ""
}

// Lines is the child's output, closed when it ends.
func (p *Proc) Lines() <-chan string { return p.lines }

// Signal sends sig to the child.
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// Kill kills the child and waits for it to end.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Say writes a line for the parent: prefix, then the text.
func Say(prefix, format string, args ...any) {
	fmt.Fprintf(os.Stdout, prefix+format+"\n", args...)
}

// Buffer is a strings.Builder that one goroutine may write (a child's
// stderr, a logger) while another reads it.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
