package testenv

import (
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// RedisServer is a throwaway redis-server on a loopback port.
type RedisServer struct {
	Addr string
	cmd  *exec.Cmd
}

// Restart kills the server and starts it again on the same port, empty
// (it has no persistence), and waits until it answers.
func (s *RedisServer) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.cmd = exec.Command(s.cmd.Path, s.cmd.Args[1:]...)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.waitReady(t)
}

func (s *RedisServer) waitReady(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for dial(s.Addr) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not start", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: no goodbye to clients).
func (s *RedisServer) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// RedisServers starts n independent redis-server processes on free
// loopback ports, without persistence; t.Cleanup stops them.
func RedisServers(t testing.TB, n int) []*RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server binary", "PATH", "PATH", err)
	}
	servers := make([]*RedisServer, n)
	for i := range servers {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		s := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
		t.Cleanup(s.Stop)
		servers[i] = s
	}
	for _, s := range servers {
		s.waitReady(t)
	}
	return servers
}
