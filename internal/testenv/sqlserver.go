package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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

// Kill kills every process of the server at once (SIGKILL), as the loss
// of its machine would: nothing more is written or sent to a standby.
func (s *SQLServer) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	signalTree(s.cmd.Process.Pid, syscall.SIGSTOP) // no new children meanwhile
	signalTree(s.cmd.Process.Pid, syscall.SIGKILL)
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

// signalTree sends sig to pid, then to every process descended from it
// as /proc showed them before (a killed parent's children are handed to
// init, where they could no longer be found).
func signalTree(pid int, sig syscall.Signal) {
	tree := descendants(pid)
	_ = syscall.Kill(pid, sig)
	for _, p := range tree {
		_ = syscall.Kill(p, sig)
	}
}

// descendants lists the processes descended from pid.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var tree []int
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
			tree = append(append(tree, child), descendants(child)...)
		}
	}
	return tree
}

// PostgresServer initialises and starts a throwaway PostgreSQL cluster
// (the binaries of the machine's PostgreSQL, found with pg_config);
// t.Cleanup stops it and removes its data.
func PostgresServer(t testing.TB) *SQLServer {
	t.Helper()
	pg := newPostgresInstall(t)
	data := filepath.Join(pg.dir, "data")
	if out, err := pg.command("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	return pg.start(t, data)
}

// postgresInstall is the machine's PostgreSQL binaries, a directory for
// throwaway clusters, and the user they run as.
type postgresInstall struct {
	bin, dir string
	owner    *user.User // nil: the current user
}

func newPostgresInstall(t testing.TB) postgresInstall {
	t.Helper()
	out, err := exec.Command("pg_config", "--bindir").Output()
	if err != nil {
		Unavailable(t, "PostgreSQL binaries", "pg_config", "PATH", err)
	}
	pg := postgresInstall{bin: string(out[:len(out)-1])}
	// Not t.TempDir: its parent is closed to other users.
	if pg.dir, err = os.MkdirTemp("", "dlock-postgres-"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pg.dir) })
	if os.Geteuid() == 0 {
		if pg.owner, err = user.Lookup("postgres"); err != nil {
			Unavailable(t, "a postgres user to run PostgreSQL as (not root)", "/etc/passwd", "PATH", err)
		}
		uid, _ := strconv.Atoi(pg.owner.Uid)
		if err := os.Chown(pg.dir, uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	return pg
}

// command is the PostgreSQL program name run as the install's user.
func (pg postgresInstall) command(name string, args ...string) *exec.Cmd {
	return command(pg.owner, filepath.Join(pg.bin, name), args...)
}

// start starts a server on the cluster in data, on a free port, and waits
// until it serves; t.Cleanup kills it.
func (pg postgresInstall) start(t testing.TB, data string, settings ...string) *SQLServer {
	t.Helper()
	port := freePort(t)
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", pg.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"}
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	s := &SQLServer{
		Driver: "pgx",
		DSN:    "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable",
		port:   port,
		start:  func() *exec.Cmd { return pg.command("postgres", args...) },
	}
	t.Cleanup(s.Kill)
	s.run(t)
	return s
}

// MariaDBServer initialises and starts a throwaway MariaDB server (the
// machine's mariadbd); t.Cleanup stops it and removes its data.
func MariaDBServer(t testing.TB) *SQLServer {
	t.Helper()
	return MariaDBServerWith(t)
}

// MariaDBServerWith is MariaDBServer with args added to the server's
// command line (its binary log is off unless args turn it on).
func MariaDBServerWith(t testing.TB, args ...string) *SQLServer {
	t.Helper()
	s := mariadbServer(t, append([]string{"--skip-log-bin"}, args...)...)
	if _, err := s.Exec("CREATE DATABASE test"); err != nil {
		t.Fatal(err)
	}
	return s
}

// mariadbServer starts a throwaway MariaDB server with args added, and
// sets its DSN to the database test (which it does not create).
func mariadbServer(t testing.TB, args ...string) *SQLServer {
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
	args = append([]string{"--no-defaults", "--datadir=" + data, "--port=" + strconv.Itoa(port),
		"--bind-address=127.0.0.1", "--socket=" + filepath.Join(dir, "sock"), "--user=root"}, args...)
	s := &SQLServer{
		Driver: "mysql",
		DSN:    base + "?parseTime=true",
		port:   port,
		start:  func() *exec.Cmd { return exec.Command(bin, args...) },
	}
	t.Cleanup(s.Crash)
	s.run(t)
	s.DSN = base + "test?parseTime=true"
	return s
}

// Exec runs one statement on the server (its DSN's database, or none if
// that does not exist yet).
func (s *SQLServer) Exec(query string, args ...any) (sql.Result, error) {
	dsn := s.DSN
	if s.Driver == "mysql" {
		dsn = strings.Replace(dsn, ")/test?", ")/?", 1)
	}
	db, err := sql.Open(s.Driver, dsn)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return db.ExecContext(ctx, query, args...)
}

// Query runs one query on the server and returns the first row's
// columns as strings, by name (nil: no row).
func (s *SQLServer) Query(query string, args ...any) (map[string]string, error) {
	db, err := sql.Open(s.Driver, s.DSN)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil || !rows.Next() {
		return nil, errors.Join(err, rows.Err())
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	row := make(map[string]string, len(cols))
	for i, c := range cols {
		row[c] = vals[i].String
	}
	return row, nil
}

// GaleraDSNs returns the DSNs of the three nodes of scripts/services.sh
// galera's MariaDB Galera cluster, database test, once every node is
// Synced; it starts the cluster (as root: the nodes run as user mysql)
// unless a node answers.
func GaleraDSNs(t testing.TB) []string {
	t.Helper()
	var dsns []string
	for i := 1; i <= 3; i++ {
		dsns = append(dsns, "root@tcp(127.0.0.1:331"+strconv.Itoa(i)+")/test?parseTime=true")
	}
	if !galeraSynced(dsns) {
		// The script starts what is not running (a node killed by
		// KillGaleraNode rejoins), and leaves the rest alone.
		root, err := ModuleRoot()
		if err == nil {
			var out []byte
			if out, err = exec.Command("bash", filepath.Join(root, "scripts", "services.sh"), "galera").CombinedOutput(); err != nil {
				err = fmt.Errorf("%v: %s", err, out)
			}
		}
		if err != nil {
			Unavailable(t, "MariaDB Galera cluster", "127.0.0.1:3311-3313", "scripts/services.sh galera", err)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for !galeraSynced(dsns) {
			if time.Now().After(deadline) {
				t.Fatalf("the Galera cluster's nodes are not all Synced within 2 minutes (logs in %s/galera-*)", ServicesDir())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return dsns
}

// galeraSynced reports whether every node answers, Synced, in a cluster
// of all of them.
func galeraSynced(dsns []string) bool {
	for _, dsn := range dsns {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return false
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var name, state, size string
		err = db.QueryRowContext(ctx, "SHOW STATUS LIKE 'wsrep_local_state_comment'").Scan(&name, &state)
		if err == nil {
			err = db.QueryRowContext(ctx, "SHOW STATUS LIKE 'wsrep_cluster_size'").Scan(&name, &size)
		}
		cancel()
		db.Close()
		if err != nil || state != "Synced" || size != strconv.Itoa(len(dsns)) {
			return false
		}
	}
	return true
}

// KillGaleraNode kills node n (1–3) of the Galera cluster GaleraDSNs
// starts (SIGKILL: the node's clients see their connections hang or
// fail, the other two go on as the cluster). GaleraDSNs starts it again.
func KillGaleraNode(t testing.TB, n int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ServicesDir(), "galera-"+strconv.Itoa(n), "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for i := 0; syscall.Kill(pid, 0) == nil && i < 1000; i++ { // a zombie nobody reaps ends the wait
		time.Sleep(10 * time.Millisecond)
	}
}
