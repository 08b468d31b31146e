package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dlockhq/dlock"
)

// runSpec is what dlock run was asked to do.
type runSpec struct {
	name    string
	argv    []string
	timeout time.Duration // for the lock; 0: no limit
	grace   time.Duration // between SIGTERM and SIGKILL
	payload string        // dlock.WithPayload; "" for none
}

// run takes the lock, runs the command under it and returns the exit
// status (see the package doc).
func run(ctx context.Context, t *target, r runSpec, stdout, stderr io.Writer) int {
	var opts []dlock.LockOption
	if r.timeout > 0 {
		opts = append(opts, dlock.WaitAtMost(r.timeout))
	}
	if r.payload != "" {
		opts = append(opts, dlock.WithPayload(r.payload))
	}
	lease, err := dlock.LockWith(ctx, t.locker, r.name, opts...)
	if err != nil {
		fmt.Fprintln(stderr, "dlock run:", err)
		return exitFailed
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = lease.Unlock(uctx) // a lease already lost reports it; said above
	}()
	env := []string{"DLOCK_NAME=" + r.name, "DLOCK_TOKEN=" + strconv.FormatUint(lease.Token(), 10), "DLOCK_OWNER=" + lease.Owner()}
	g, err := startGroup(r.argv, env, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "dlock run:", err)
		return 127
	}
	defer g.close()
	lost := false
	select {
	case err := <-g.exited:
		return g.finish(status(err), r.grace, stderr)
	case <-lease.Done():
		lost = true
		fmt.Fprintf(stderr, "dlock run: the lease of %q is lost (%v): stopping the command\n", r.name, lease.Err())
	case <-ctx.Done():
		fmt.Fprintln(stderr, "dlock run: interrupted: stopping the command")
	}
	code := g.finish(g.stop(r.grace), r.grace, stderr)
	if lost && code == 0 {
		code = exitFailed
	}
	return code
}

// group is the command of dlock run in a process group of its own, led
// by a supervisor (this program again, see supervise), so that a signal
// reaches every process the command started, and nothing of it outlives
// dlock run: not when dlock run is killed (SIGKILL included), and not a
// process a script left behind.
type group struct {
	cmd    *exec.Cmd // the supervisor; its pid is the group's id
	life   *os.File  // the write end of the supervisor's pipe; see supervise
	exited chan error
}

// startGroup starts argv, with env added to this process's environment,
// under a supervisor leading a new process group.
func startGroup(argv, env []string, stdout, stderr io.Writer) (*group, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, argv...)
	cmd.Env = append(append(os.Environ(), supervisorEnv+"=1"), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A writer that is not a file is fed by a copy that lasts as long as
	// any process holds the pipe: a child the command left would keep
	// Wait from returning, and finish from stopping it.
	cmd.WaitDelay = 100 * time.Millisecond
	err = cmd.Start()
	_ = r.Close() // the supervisor's end, open in it alone now
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	g := &group{cmd: cmd, life: w, exited: make(chan error, 1)}
	go func() {
		err := cmd.Wait()
		if errors.Is(err, exec.ErrWaitDelay) { // exited; the leftovers' output is cut off
			err = nil
			if !cmd.ProcessState.Success() {
				err = &exec.ExitError{ProcessState: cmd.ProcessState}
			}
		}
		g.exited <- err
	}()
	return g, nil
}

// signal sends sig to every process of the group.
func (g *group) signal(sig syscall.Signal) error { return syscall.Kill(-g.cmd.Process.Pid, sig) }

// stop sends the group SIGTERM, and SIGKILL grace later, and returns the
// command's status once the supervisor has exited.
func (g *group) stop(grace time.Duration) int {
	_ = g.signal(syscall.SIGTERM) // it may have exited already
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case err := <-g.exited:
		return status(err)
	case <-timer.C:
		_ = g.signal(syscall.SIGKILL)
		return status(<-g.exited)
	}
}

// finish stops what the command left running in its group (a script's
// background children), as stop does, before the lock is released, and
// returns code.
func (g *group) finish(code int, grace time.Duration, stderr io.Writer) int {
	if !g.alive() {
		return code
	}
	fmt.Fprintln(stderr, "dlock run: the command left processes running in its group: stopping them")
	_ = g.signal(syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for g.alive() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g.alive() {
		_ = g.signal(syscall.SIGKILL)
	}
	for i := 0; g.alive() && i < 500; i++ { // SIGKILL takes effect at once; bounded all the same
		time.Sleep(10 * time.Millisecond)
	}
	return code
}

// alive reports whether a process of the group is left, not counting
// zombies (dead, waiting to be reaped by a parent that may never: an
// orphan's is PID 1, which in a container need not reap). Where /proc
// cannot tell, any process the group's signal reaches counts.
func (g *group) alive() bool {
	if g.signal(0) != nil {
		return false
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	pgid := strconv.Itoa(g.cmd.Process.Pid)
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 && f[2] == pgid && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// close lets the supervisor's pipe go: a supervisor still running (it
// cannot be, past finish) would kill its group.
func (g *group) close() { _ = g.life.Close() }

// supervisorEnv marks a process that dlock run started as its command's
// supervisor.
const supervisorEnv = "DLOCK_RUN_SUPERVISOR"

// superviseIfAsked runs supervise, and exits with its status, in a
// process that dlock run started as a supervisor; otherwise it returns.
func superviseIfAsked() {
	if os.Getenv(supervisorEnv) != "1" {
		return
	}
	os.Exit(supervise(os.Args[1:]))
}

// supervise runs argv in this process's group, which dlock run made it
// lead, and returns its status. File descriptor 3 is the read end of a
// pipe whose write end only dlock run holds: end of file means dlock run
// has exited, killed or not, so nothing renews the lease any more, and
// supervise kills the group at once, itself included. A SIGTERM or
// SIGINT that dlock run sends the group is the command's to act on: this
// process waits for the command's status.
func supervise(argv []string) int {
	_ = os.Unsetenv(supervisorEnv) // not the command's
	signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM, syscall.SIGINT)
	syscall.CloseOnExec(3)
	life := os.NewFile(3, "dlock run")
	if len(argv) == 0 || life == nil {
		fmt.Fprintln(os.Stderr, "dlock run: the supervisor was started without a command")
		return exitUsage
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "dlock run:", err)
		return 127
	}
	go func() {
		_, _ = io.Copy(io.Discard, life)     // returns at end of file: dlock run has exited
		_ = syscall.Kill(0, syscall.SIGKILL) // this process's group
	}()
	return status(cmd.Wait())
}

// status is a finished command's exit status: its code, or 128+N for a
// signal N.
func status(err error) int {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		if err != nil {
			return exitFailed
		}
		return 0
	}
	if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return exit.ExitCode()
}
