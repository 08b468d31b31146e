package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
	dir := s.cmd.Dir
	s.cmd = exec.Command(s.cmd.Path, s.cmd.Args[1:]...)
	s.cmd.Dir = dir
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
// Freeze stops the server (SIGSTOP): connections stay open, nothing is
// answered.
func (s *RedisServer) Freeze() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Thaw lets a frozen server go on.
func (s *RedisServer) Thaw() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

func (s *RedisServer) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
		s.cmd.Wait()
	}
}

// RedisServers starts n independent redis-server processes on free
// loopback ports, without persistence; t.Cleanup stops them.
func RedisServers(t testing.TB, n int) []*RedisServer {
	return redisServers(t, n, func(int) []string { return nil })
}

// redisServers starts n redis-servers, server i with the arguments
// extra(port) appended, and waits until they answer.
func redisServers(t testing.TB, n int, extra func(port int) []string) []*RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		Unavailable(t, "redis-server binary", "PATH", "PATH", err)
	}
	servers := make([]*RedisServer, n)
	for i := range servers {
		port := freePort(t)
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"}, extra(port)...)
		cmd := exec.Command(bin, args...)
		cmd.Dir = t.TempDir()
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

// RedisTLSServer starts a redis-server that accepts only TLS, with the
// certificate and key in PEM files certFile and keyFile; clients are not
// asked for certificates.
func RedisTLSServer(t testing.TB, certFile, keyFile string) *RedisServer {
	t.Helper()
	return redisServers(t, 1, func(port int) []string {
		return []string{"--port", "0", "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile,
			"--tls-key-file", keyFile, "--tls-ca-cert-file", certFile, "--tls-auth-clients", "no"}
	})[0]
}

// RedisCluster starts a Redis Cluster of n masters (no replicas) on
// loopback ports and waits until it serves every slot; it returns the
// masters' addresses.
func RedisCluster(t testing.TB, n int) []string {
	t.Helper()
	servers := redisServers(t, n, func(port int) []string {
		return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + strconv.Itoa(port) + ".conf"}
	})
	args := []string{"--cluster", "create"}
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr)
	}
	args = append(append(args, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, a := range addrs {
			host, port, _ := net.SplitHostPort(a)
			out, err := exec.Command("redis-cli", "-h", host, "-p", port, "cluster", "info").Output()
			if err != nil || !strings.Contains(string(out), "cluster_state:ok") {
				ok = false
			}
		}
		if ok {
			return addrs
		}
		if time.Now().After(deadline) {
			t.Fatal("the Redis Cluster did not reach cluster_state:ok")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RedisSentinel is a master, a replica and a Sentinel watching them as
// MasterName, for failover tests.
type RedisSentinel struct {
	MasterName      string
	Master, Replica *RedisServer
	SentinelAddr    string
}

// StartRedisSentinel starts a master, its replica and one Sentinel (quorum
// 1, master declared down after 500ms) on loopback ports.
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	master := RedisServers(t, 1)[0]
	_, mport, _ := net.SplitHostPort(master.Addr)
	replica := redisServers(t, 1, func(int) []string { return []string{"--replicaof", "127.0.0.1", mport} })[0]
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	port := freePort(t)
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\nsentinel monitor dlock 127.0.0.1 %s 1\n"+
		"sentinel down-after-milliseconds dlock 500\nsentinel failover-timeout dlock 2000\n", port, mport)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sentinel := &RedisServer{Addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd}
	t.Cleanup(sentinel.Stop)
	sentinel.waitReady(t)
	// Wait until the replica has synced, so a failover has a replica to
	// promote.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, rport, _ := net.SplitHostPort(replica.Addr)
		out, _ := exec.Command("redis-cli", "-p", rport, "info", "replication").Output()
		if strings.Contains(string(out), "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Redis replica did not sync")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return &RedisSentinel{MasterName: "dlock", Master: master, Replica: replica, SentinelAddr: sentinel.Addr}
}
