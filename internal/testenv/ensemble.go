package testenv

import (
	"bufio"
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

// ZKEnsemble is the 3-node ZooKeeper ensemble of scripts/services.sh
// (client ports 2191-2193 on 127.0.0.1).
type ZKEnsemble struct {
	Addrs []string
	dir   string
	root  string
}

// ModuleRoot finds the directory holding go.mod, for scripts/.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// ServicesDir is where scripts/services.sh keeps its servers' state.
func ServicesDir() string {
	if d := os.Getenv("DLOCK_SERVICES_DIR"); d != "" {
		return d
	}
	return "/tmp/dlock-services"
}

// StartZKEnsemble starts (or finds running) the 3-node ensemble and waits
// until every node serves as a member of a quorum.
func StartZKEnsemble(t testing.TB) *ZKEnsemble {
	t.Helper()
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	e := &ZKEnsemble{dir: ServicesDir(), root: root}
	for i := 1; i <= 3; i++ {
		e.Addrs = append(e.Addrs, "127.0.0.1:219"+strconv.Itoa(i))
	}
	e.start(t)
	e.waitServing(t)
	return e
}

func (e *ZKEnsemble) start(t testing.TB) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(e.root, "scripts", "services.sh"), "zk-ensemble")
	if out, err := cmd.CombinedOutput(); err != nil {
		Unavailable(t, "ZooKeeper ensemble", strings.Join(e.Addrs, ","), "scripts/services.sh zk-ensemble", fmt.Errorf("%v: %s", err, out))
	}
}

// waitServing waits until every node serves: a node answers ruok (what
// the script waits for) before it has joined a quorum.
func (e *ZKEnsemble) waitServing(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for !e.Serving() {
		if time.Now().After(deadline) {
			t.Fatalf("ZooKeeper ensemble %v: no quorum within 90 s (logs in %s)", e.Addrs, e.dir)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Restart starts any stopped node again.
func (e *ZKEnsemble) Restart(t testing.TB) { e.start(t) }

// Mode returns "leader", "follower" or "" (not serving) for node i (0-2),
// from the srvr four-letter word.
func (e *ZKEnsemble) Mode(i int) string {
	c, err := net.DialTimeout("tcp", e.Addrs[i], time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprint(c, "srvr")
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return m
		}
	}
	return ""
}

// Leader returns the index of the leader, or -1.
func (e *ZKEnsemble) Leader() int {
	for i := range e.Addrs {
		if e.Mode(i) == "leader" {
			return i
		}
	}
	return -1
}

// Kill stops node i with SIGKILL.
func (e *ZKEnsemble) Kill(t testing.TB, i int) {
	t.Helper()
	e.signal(t, i, syscall.SIGKILL)
	for dial(e.Addrs[i]) == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

// Freeze stops node i (SIGSTOP): its connections stay open, it answers
// nothing. Thaw lets it go on.
func (e *ZKEnsemble) Freeze(t testing.TB, i int) { e.signal(t, i, syscall.SIGSTOP) }

// Thaw lets a frozen node go on.
func (e *ZKEnsemble) Thaw(t testing.TB, i int) { e.signal(t, i, syscall.SIGCONT) }

func (e *ZKEnsemble) signal(t testing.TB, i int, sig syscall.Signal) {
	t.Helper()
	pidFile := filepath.Join(e.dir, "zk-ens"+strconv.Itoa(i+1), "pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatal(err)
	}
}

// Serving reports whether every node answers as a member of a quorum
// (mode leader or follower), not only that its port is open: a restarted
// node answers ruok before it has rejoined.
func (e *ZKEnsemble) Serving() bool {
	for i := range e.Addrs {
		if m := e.Mode(i); m != "leader" && m != "follower" {
			return false
		}
	}
	return true
}
