package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
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
	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Env = append(os.Environ(), "DLOCK_NAME="+r.name, "DLOCK_TOKEN="+strconv.FormatUint(lease.Token(), 10),
		"DLOCK_OWNER="+lease.Owner())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "dlock run:", err)
		return 127
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	lost := false
	select {
	case err := <-exited:
		return status(err)
	case <-lease.Done():
		lost = true
		fmt.Fprintf(stderr, "dlock run: the lease of %q is lost (%v): stopping the command\n", r.name, lease.Err())
	case <-ctx.Done():
		fmt.Fprintln(stderr, "dlock run: interrupted: stopping the command")
	}
	code := stop(cmd, exited, r.grace)
	if lost && code == 0 {
		code = exitFailed
	}
	return code
}

// stop sends the command SIGTERM, and SIGKILL grace later, and returns
// its status once it has exited.
func stop(cmd *exec.Cmd, exited <-chan error, grace time.Duration) int {
	_ = cmd.Process.Signal(syscall.SIGTERM) // it may have exited already
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case err := <-exited:
		return status(err)
	case <-timer.C:
		_ = cmd.Process.Kill()
		return status(<-exited)
	}
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
