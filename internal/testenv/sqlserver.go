package testenv

import (
	"context"
	"database/sql"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SQLServer is a throwaway PostgreSQL or MariaDB server of its own, on a
// loopback port, for faults that must not touch the machine's servers:
// it can crash and restart.
type SQLServer struct {
	// Driver is "pgx" or "mysql"; DSN reaches the server's test database.
	Driver, DSN string
	start       func() *exec.Cmd
	cmd         *exec.Cmd
	port        int
}

// Crash stops the server at once, as a crash would: PostgreSQL by an
// immediate shutdown (SIGQUIT: no checkpoint, recovery at the next
// start), MariaDB by SIGKILL.
func (s *SQLServer) Crash() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	sig := syscall.SIGKILL
	if s.Driver == "pgx" {
		sig = syscall.SIGQUIT
	}
	_ = s.cmd.Process.Signal(sig)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart crashes the server and starts it again on the same port and
// data, and waits until it serves.
func (s *SQLServer) Restart(t testing.TB) {
	t.Helper()
	s.Crash()
	s.run(t)
}

func (s *SQLServer) run(t testing.TB) {
	t.Helper()
	s.cmd = s.start()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open(s.Driver, s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := db.PingContext(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s server on port %d did not start: %v", s.Driver, s.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// command runs name as the user owner when the process runs as root
// (PostgreSQL refuses to run as root).
func command(owner *user.User, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	if owner != nil {
		uid, _ := strconv.Atoi(owner.Uid)
		gid, _ := strconv.Atoi(owner.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	return cmd
}

// Freeze stops every process of the server (SIGSTOP), the server's own and
// its children (PostgreSQL's backends are in sessions of their own): it
// keeps its connections open and answers nothing, as a server that hangs
// would.
func (s *SQLServer) Freeze() { signalTree(s.cmd.Process.Pid, syscall.SIGSTOP) }

// Thaw lets a frozen server go on.
func (s *SQLServer) Thaw() { signalTree(s.cmd.Process.Pid, syscall.SIGCONT) }

// signalTree sends sig to pid and every process descended from it, as
// /proc shows them.
func signalTree(pid int, sig syscall.Signal) {
	_ = syscall.Kill(pid, sig)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			signalTree(child, sig)
		}
	}
}

// PostgresServer initialises and starts a throwaway PostgreSQL cluster
// (the binaries of the machine's PostgreSQL, found with pg_config);
// t.Cleanup stops it and removes its data.
func PostgresServer(t testing.TB) *SQLServer {
	t.Helper()
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		Unavailable(t, "PostgreSQL binaries", "pg_config", "PATH", err)
	}
	bin := string(out[:len(out)-1])
	// Not t.TempDir: its parent is closed to other users.
	dir, err := os.MkdirTemp("", "dlock-postgres-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var owner *user.User
	if os.Geteuid() == 0 {
		if owner, err = user.Lookup("postgres"); err != nil {
			Unavailable(t, "a postgres user to run PostgreSQL as (not root)", "/etc/passwd", "PATH", err)
		}
		uid, _ := strconv.Atoi(owner.Uid)
		if err := os.Chown(dir, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := command(owner, filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := freePort(t)
	s := &SQLServer{
		Driver: "pgx",
		DSN:    "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable",
		port:   port,
		start: func() *exec.Cmd {
			return command(owner, filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
				"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200")
		},
	}
	t.Cleanup(s.Crash)
	s.run(t)
	return s
}

// MariaDBServer initialises and starts a throwaway MariaDB server (the
// machine's mariadbd); t.Cleanup stops it and removes its data.
func MariaDBServer(t testing.TB) *SQLServer {
	t.Helper()
	bin, err := exec.LookPath("mariadbd")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/mariadbd"); err != nil {
			Unavailable(t, "MariaDB binaries", "mariadbd", "PATH", err)
		}
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if out, err := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput(); err != nil {
		t.Fatalf("mariadb-install-db: %v\n%s", err, out)
	}
	port := freePort(t)
	base := "root@tcp(127.0.0.1:" + strconv.Itoa(port) + ")/"
	s := &SQLServer{
		Driver: "mysql",
		DSN:    base + "?parseTime=true",
		port:   port,
		start: func() *exec.Cmd {
			return exec.Command(bin, "--no-defaults", "--datadir="+data, "--port="+strconv.Itoa(port),
				"--bind-address=127.0.0.1", "--socket="+filepath.Join(dir, "sock"), "--user=root", "--skip-log-bin")
		},
	}
	t.Cleanup(s.Crash)
	s.run(t)
	db, err := sql.Open("mysql", s.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE test"); err != nil {
		t.Fatal(err)
	}
	s.DSN = base + "test?parseTime=true"
	return s
}
