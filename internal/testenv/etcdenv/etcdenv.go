// Package etcdenv reaches the etcd servers of scripts/services.sh for
// tests: the single member of DLOCK_ETCD_ENDPOINTS and the 3-member
// cluster. It is apart from package testenv so that only etcd's tests
// link etcd's client.
package etcdenv

import (
	"context"
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

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockhq/dlock/internal/servers"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Endpoints are the single member's endpoints (DLOCK_ETCD_ENDPOINTS).
func Endpoints() []string { return servers.EtcdEndpoints() }

// Client is a client of endpoints that has reached them; t.Cleanup
// closes it. An unreachable server skips t, or fails it under
// DLOCK_REQUIRE_SERVICES=1.
func Client(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		testenv.Unavailable(t, "etcd", strings.Join(endpoints, ","), servers.EtcdEnv, err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Get(ctx, "dlock-ping"); err != nil {
		testenv.Unavailable(t, "etcd", strings.Join(endpoints, ","), servers.EtcdEnv, err)
	}
	return c
}

// Cluster is the 3-member cluster of scripts/services.sh (client ports
// 2391-2393 on 127.0.0.1).
type Cluster struct {
	Endpoints []string
	dir, root string
}

// StartCluster starts (or finds running) the cluster and waits until it
// has a leader.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{dir: testenv.ServicesDir(), root: root}
	for i := 1; i <= 3; i++ {
		c.Endpoints = append(c.Endpoints, "127.0.0.1:239"+strconv.Itoa(i))
	}
	c.Restart(t)
	return c
}

// Restart starts any stopped member again and waits for a leader.
func (c *Cluster) Restart(t testing.TB) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(c.root, "scripts", "services.sh"), "etcd-cluster")
	if out, err := cmd.CombinedOutput(); err != nil {
		testenv.Unavailable(t, "etcd cluster", strings.Join(c.Endpoints, ","), "scripts/services.sh etcd-cluster", fmt.Errorf("%v: %s", err, out))
	}
	deadline := time.Now().Add(60 * time.Second)
	for c.Leader(t) < 0 {
		if time.Now().After(deadline) {
			t.Fatalf("etcd cluster %v: no leader within 60 s (logs in %s)", c.Endpoints, c.dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Leader is the index of the member that leads, or -1.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	cl, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return -1
	}
	defer cl.Close()
	for i, ep := range c.Endpoints {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := cl.Status(ctx, ep)
		cancel()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return i
		}
	}
	return -1
}

// Kill stops member i with SIGKILL.
func (c *Cluster) Kill(t testing.TB, i int) { c.signal(t, i, syscall.SIGKILL) }

// Freeze stops member i (SIGSTOP); Thaw lets it go on.
func (c *Cluster) Freeze(t testing.TB, i int) { c.signal(t, i, syscall.SIGSTOP) }

// Thaw lets a frozen member go on.
func (c *Cluster) Thaw(t testing.TB, i int) { c.signal(t, i, syscall.SIGCONT) }

func (c *Cluster) signal(t testing.TB, i int, sig syscall.Signal) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "etcd-m"+strconv.Itoa(i+1), "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("signal %v to etcd member %d: %v", sig, i+1, err)
	}
	for sig == syscall.SIGKILL {
		conn, err := net.DialTimeout("tcp", c.Endpoints[i], time.Second)
		if err != nil {
			return
		}
		conn.Close()
		time.Sleep(20 * time.Millisecond)
	}
}
