package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	s.restart(t, s.cmd.Args[1:])
}

// Save writes the server's RDB snapshot to its directory (SAVE), from
// which RestartFromSnapshot restarts it.
func (s *RedisServer) Save(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	if out, err := exec.Command("redis-cli", "-p", port, "save").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "OK" {
		t.Fatalf("SAVE on %s: %v %s", s.Addr, err, out)
	}
}

// RestartFromSnapshot kills the server and starts it again on the same
// port, loading the last snapshot Save wrote: Redis's default
// persistence, which loses every write since the snapshot.
func (s *RedisServer) RestartFromSnapshot(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(s.cmd.Dir, "dump.rdb")); err != nil {
		t.Fatalf("no snapshot to restart from: %v", err)
	}
	s.restart(t, s.cmd.Args[1:])
}

// restart kills the server and starts it again on the same port and
// directory with args.
func (s *RedisServer) restart(t testing.TB, args []string) {
	t.Helper()
	s.Stop()
	dir := s.cmd.Dir
	s.cmd = exec.Command(s.cmd.Path, args...)
	s.cmd.Dir = dir
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.waitReady(t)
}

// WaitUp waits until the server has surely been up for d: a fresh server
// holds first grants back until it has surely been up for their TTL.
func (s *RedisServer) WaitUp(t testing.TB, d time.Duration) { WaitRedisUp(t, s.Addr, d) }

// WaitRedisUp waits until the Redis server on addr has surely been up for
// d (see RedisServer.WaitUp): its uptime_in_seconds, a difference of
// whole seconds, is at least d plus one. A test on fresh servers calls it
// before the calls it times, so the hold-back does not count against
// their deadlines.
func WaitRedisUp(t testing.TB, addr string, d time.Duration) {
	t.Helper()
	_, port, _ := net.SplitHostPort(addr)
	deadline := time.Now().Add(d + 11*time.Second)
	for {
		out, _ := exec.Command("redis-cli", "-p", port, "info", "server").Output()
		for _, line := range strings.Split(string(out), "\n") {
			if up, ok := strings.CutPrefix(strings.TrimSpace(line), "uptime_in_seconds:"); ok {
				if n, err := strconv.Atoi(up); err == nil && time.Duration(n-1)*time.Second >= d {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s was not up for %v in time", addr, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
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

// RedisServerWith starts a throwaway redis-server with args after the
// defaults (no persistence), which they may override: "--appendonly",
// "yes", "--appendfsync", "always" for a server that keeps every write.
func RedisServerWith(t testing.TB, args ...string) *RedisServer {
	return redisServers(t, 1, func(int) []string { return args })[0]
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

// RedisClusterReplicated starts a Redis Cluster of 3 masters, each with
// a replica, that fails a master over to its replica after a node timeout
// of 2 s, and waits until it serves every slot and each replica follows
// its master. It returns the six servers.
func RedisClusterReplicated(t testing.TB) []*RedisServer {
	t.Helper()
	servers := redisServers(t, 6, func(port int) []string {
		return []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + strconv.Itoa(port) + ".conf",
			"--cluster-node-timeout", "2000"}
	})
	args := []string{"--cluster", "create"}
	for _, s := range servers {
		args = append(args, s.Addr)
	}
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for !clusterReady(servers) {
		if time.Now().After(deadline) {
			t.Fatal("the Redis Cluster with replicas did not reach cluster_state:ok with every replica linked")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return servers
}

// clusterReady reports whether every server says cluster_state:ok and
// every replica's link to its master is up.
func clusterReady(servers []*RedisServer) bool {
	for _, s := range servers {
		host, port, _ := net.SplitHostPort(s.Addr)
		info, err := exec.Command("redis-cli", "-h", host, "-p", port, "cluster", "info").Output()
		if err != nil || !strings.Contains(string(info), "cluster_state:ok") {
			return false
		}
		repl, err := exec.Command("redis-cli", "-h", host, "-p", port, "info", "replication").Output()
		if err != nil || strings.Contains(string(repl), "role:slave") && !strings.Contains(string(repl), "master_link_status:up") {
			return false
		}
	}
	return true
}

// RedisSentinel is a master, a replica and a Sentinel watching them as
// MasterName, for failover tests.
type RedisSentinel struct {
	MasterName      string
	Master, Replica *RedisServer
	SentinelAddr    string
	// link carries the replication stream from master to replica, so Lag
	// can hold it back.
	link *Proxy
}

// Lag holds back the replication stream: the replica stops receiving the
// master's writes (they wait in the link, not in the replica's socket,
// and are dropped with the master) until a Failover.
func (s *RedisSentinel) Lag() { s.link.Blackhole() }

// StartRedisSentinel starts a master, its replica and one Sentinel (quorum
// 1, master declared down after 2s: with 500ms a newly promoted master,
// busy for a moment, was declared down too and the old one, back as its
// replica, promoted again; redis/redis#8607) on loopback ports. The replica
// replicates through a proxy (see Lag); the failover timeout is long, as
// the Sentinel would otherwise "fix" a replica whose master address is
// not the master's after that time.
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	master := RedisServers(t, 1)[0]
	_, mport, _ := net.SplitHostPort(master.Addr)
	link := NewProxy(t, master.Addr)
	_, lport, _ := net.SplitHostPort(link.Addr())
	replica := redisServers(t, 1, func(int) []string { return []string{"--replicaof", "127.0.0.1", lport} })[0]
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	port := freePort(t)
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\nlogfile sentinel.log\nsentinel monitor dlock 127.0.0.1 %s 1\n"+
		"sentinel down-after-milliseconds dlock 2000\nsentinel failover-timeout dlock 60000\n", port, mport)
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
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
			t.Logf("Sentinel's log:\n%s", out)
		}
	})
	sentinel.waitReady(t)
	// Wait until the replica has synced, so a failover has a replica to
	// promote.
	replica.waitSynced(t)
	return &RedisSentinel{MasterName: "dlock", Master: master, Replica: replica, SentinelAddr: sentinel.Addr, link: link}
}

// waitSynced waits until s, a replica, has synced with its master.
func (s *RedisServer) waitSynced(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, port, _ := net.SplitHostPort(s.Addr)
		out, _ := exec.Command("redis-cli", "-p", port, "info", "replication").Output()
		if strings.Contains(string(out), "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Redis replica %s did not sync:\n%s", s.Addr, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Failover kills the master (SIGKILL), waits until the Sentinel has
// promoted the replica, and starts the old master again, empty, as the new
// master's replica, as an operator would; then Master and Replica name the
// servers' new roles. What Lag held back is lost with the master.
func (s *RedisSentinel) Failover(t testing.TB) {
	t.Helper()
	s.Master.Stop()
	s.link.Cut() // drops what the link held back
	s.link.Restore()
	s.WaitPromoted(t)
	_, port, _ := net.SplitHostPort(s.Replica.Addr)
	old := s.Master
	args := slices.Clone(old.cmd.Args[1:])
	if i := slices.Index(args, "--replicaof"); i >= 0 {
		args = slices.Delete(args, i, i+3)
	}
	old.restart(t, append(args, "--replicaof", "127.0.0.1", port))
	old.waitSynced(t)
	s.Master, s.Replica = s.Replica, old
}

// WaitPromoted waits until the Sentinel names the replica as the master
// (after the master was stopped), for at most a minute.
func (s *RedisSentinel) WaitPromoted(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Replica.Addr)
	deadline := time.Now().Add(time.Minute)
	for {
		host, sport, _ := net.SplitHostPort(s.SentinelAddr)
		out, _ := exec.Command("redis-cli", "-h", host, "-p", sport, "sentinel", "get-master-addr-by-name", s.MasterName).Output()
		if fields := strings.Fields(string(out)); len(fields) == 2 && fields[1] == port {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Sentinel did not promote the replica: it names %q", out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
