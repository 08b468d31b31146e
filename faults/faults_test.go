package faults_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/faults"
	"github.com/dlockhq/dlock/internal/servers"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/tablelock"
)

// ttl is the lease of every worker: a paused or killed holder loses its
// lock this long after its last renewal.
const ttl = time.Second

// The worker's environment.
const (
	envBackend  = "DLOCK_FAULT_BACKEND"
	envName     = "DLOCK_FAULT_NAME"
	envClient   = "DLOCK_FAULT_CLIENT"
	envResource = "DLOCK_FAULT_RESOURCE"
)

func TestMain(m *testing.M) {
	if b := os.Getenv(envBackend); b != "" {
		os.Exit(worker(b))
	}
	os.Exit(m.Run())
}

// backends are the lockers under test, each made in a worker process
// from the servers' default addresses (or their environment overrides).
var backends = []struct {
	name string
	new  func() (dlock.Locker, func(), error)
	// needs lists the servers the parent checks before starting workers.
	needs func(testing.TB)
}{
	{"tablelock/postgres", sqlLocker("pgx", tablelock.New), needPostgres},
	{"tablelock/mysql", sqlLocker("mysql", tablelock.New), needMySQL},
	{"advisory/postgres", sqlLocker("pgx", advisory.New), needPostgres},
	{"advisory/mysql", sqlLocker("mysql", advisory.New), needMySQL},
	{"redis", func() (dlock.Locker, func(), error) {
		c := redis.NewClient(&redis.Options{Addr: servers.RedisAddr()})
		l, err := redislock.New(c, dlock.WithTTL(ttl))
		return l, func() { c.Close() }, err
	}, func(t testing.TB) { testenv.RedisAddr(t) }},
	{"zk", func() (dlock.Locker, func(), error) {
		conn, _, err := zk.Connect(servers.ZKAddrs(), ttl, zk.WithLogger(nopLogger{}))
		if err != nil {
			return nil, nil, err
		}
		l, err := zklock.New(conn, "/dlock-faults", dlock.WithTTL(ttl))
		return l, conn.Close, err
	}, func(t testing.TB) { testenv.ZK(t, testenv.ZKAddrs(t), ttl) }},
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func needPostgres(t testing.TB) { testenv.Migrated(t, testenv.Postgres) }
func needMySQL(t testing.TB)    { testenv.Migrated(t, testenv.MySQL) }

func sqlLocker[L dlock.Locker](driver string, newLocker func(*sql.DB, ...dlock.Option) (L, error)) func() (dlock.Locker, func(), error) {
	return func() (dlock.Locker, func(), error) {
		db, err := sql.Open(driver, testenv.DSN(driver))
		if err != nil {
			return nil, nil, err
		}
		l, err := newLocker(db, dlock.WithTTL(ttl))
		return l, func() { db.Close() }, err
	}
}

// line is one record a worker writes to stdout.
type line struct {
	Op *faults.Op `json:"op,omitempty"`
	// Begun: the worker read the resource as a holder (a pause now
	// catches it between read and write).
	Begun bool `json:"begun,omitempty"`
	// Wrote: the worker wrote the resource; Accepted says whether the
	// fenced write was applied.
	Wrote    bool `json:"wrote,omitempty"`
	Accepted bool `json:"accepted,omitempty"`
}

// worker is the child process: lock, read the resource, write it, unlock,
// until SIGTERM, recording every call on stdout.
func worker(backend string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	client, _ := strconv.Atoi(os.Getenv(envClient))
	name := os.Getenv(envName)
	var locker dlock.Locker
	var closeLocker func()
	for _, b := range backends {
		if b.name == backend {
			l, c, err := b.new()
			if err != nil {
				return fail(err)
			}
			locker, closeLocker = l, c
		}
	}
	if locker == nil {
		return fail(fmt.Errorf("unknown backend %q", backend))
	}
	defer closeLocker()
	db, err := sql.Open("pgx", testenv.DSN("pgx"))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	res := faults.OpenResource(db, os.Getenv(envResource))
	out := json.NewEncoder(os.Stdout) // unbuffered: each line is one write
	emit := func(l line) {
		if err := out.Encode(l); err != nil {
			os.Exit(3)
		}
	}
	bg := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		op := faults.Op{Client: client, Kind: faults.Acquire, Call: faults.Now()}
		lctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		lease, err := locker.Lock(lctx, name)
		cancel()
		op.Return = faults.Now()
		if err != nil {
			op.Outcome = faults.Unknown
			emit(line{Op: &op})
			if ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "worker: Lock:", err)
			}
			continue
		}
		op.Outcome, op.Token = faults.OK, lease.Token()
		emit(line{Op: &op})

		snap, err := res.Begin(bg, lease.Token())
		if err != nil {
			return fail(err)
		}
		emit(line{Begun: true})
		time.Sleep(20 * time.Millisecond) // the work a holder does
		accepted, err := res.Commit(bg, snap)
		if err != nil {
			return fail(err)
		}
		emit(line{Wrote: true, Accepted: accepted})

		op = faults.Op{Client: client, Kind: faults.Release, Call: faults.Now()}
		err = lease.Unlock(bg)
		op.Return = faults.Now()
		switch {
		case err == nil:
			op.Outcome = faults.OK
		case errors.Is(err, dlock.ErrNotHeld) || errors.Is(err, dlock.ErrLost):
			op.Outcome = faults.Lost
		default:
			op.Outcome = faults.Unknown
		}
		emit(line{Op: &op})
	}
	return 0
}

// proc is a running worker.
type proc struct {
	client int
	cmd    *exec.Cmd
	stderr strings.Builder
	done   chan struct{} // stdout read to the end
}

type event struct {
	client int
	line   line
}

// run is one backend's fault run: workers contending for one name, and
// the faults the parent injects into them.
type run struct {
	t        *testing.T
	backend  string
	name     string
	resource string
	events   chan event
	mu       sync.Mutex
	procs    []*proc
	history  []faults.Op
	wrote    int // commits made (each an unfenced increment)
	accepted int // fenced writes applied
	rejected int // fenced writes refused: the writer's token was stale
}

func (r *run) start() *proc {
	r.mu.Lock()
	p := &proc{client: len(r.procs), done: make(chan struct{})}
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(),
		envBackend+"="+r.backend, envName+"="+r.name, envResource+"="+r.resource,
		envClient+"="+strconv.Itoa(p.client))
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var l line
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				r.t.Errorf("worker %d: %v: %q", p.client, err, sc.Text())
				continue
			}
			r.events <- event{p.client, l}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	return p
}

// record keeps e and reports whether it is client's "begun".
func (r *run) record(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case e.line.Op != nil:
		r.history = append(r.history, *e.line.Op)
	case e.line.Wrote:
		r.wrote++
		if e.line.Accepted {
			r.accepted++
		} else {
			r.rejected++
		}
	}
}

// untilBegun records events until worker client has read the resource
// as a holder.
func (r *run) untilBegun(client int) {
	deadline := time.After(dlocktest.Timeout)
	for {
		select {
		case e := <-r.events:
			r.record(e)
			if e.client == client && e.line.Begun {
				return
			}
		case <-deadline:
			r.t.Fatalf("worker %d never held the lock", client)
		}
	}
}

// recordFor records events for d.
func (r *run) recordFor(d time.Duration) {
	end := time.After(d)
	for {
		select {
		case e := <-r.events:
			r.record(e)
		case <-end:
			return
		}
	}
}

// grantsSince counts grants to clients other than client after t.
func (r *run) grantsSince(client int, t int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, op := range r.history {
		if op.Kind == faults.Acquire && op.Outcome == faults.OK && op.Client != client && op.Call > t {
			n++
		}
	}
	return n
}

func rounds() int {
	if n, err := strconv.Atoi(os.Getenv("DLOCK_FAULT_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// TestFaults runs, per backend, three workers in contention for one lock
// around a Resource; each round pauses one holder (SIGSTOP) past its TTL
// between its read and its write, then kills one (SIGKILL). The history
// must be linearizable for a mutex with increasing tokens, and the fenced
// counter must count every accepted write: no update lost.
func TestFaults(t *testing.T) {
	db := testenv.Postgres(t)
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			b.needs(t)
			name := dlocktest.Name(t)
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			defer cancel()
			res, err := faults.NewResource(ctx, db, name)
			if err != nil {
				t.Fatal(err)
			}
			r := &run{t: t, backend: b.name, name: name, resource: name, events: make(chan event, 1024)}
			var live []*proc
			for range 3 {
				live = append(live, r.start())
			}
			defer func() {
				if t.Failed() {
					for _, p := range r.procs {
						t.Logf("worker %d stderr:\n%s", p.client, p.stderr.String())
					}
				}
			}()
			r.recordFor(500 * time.Millisecond)
			pausesCaught := 0
			for range rounds() {
				// Pause a holder between its read and its write, past
				// its TTL; the lock must move on, and its write must be
				// refused.
				victim := live[0]
				r.untilBegun(victim.client)
				if err := victim.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
					t.Fatal(err)
				}
				stopped := faults.Now()
				r.recordFor(3*ttl + time.Second)
				if r.grantsSince(victim.client, stopped) > 0 {
					pausesCaught++
				}
				if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					t.Fatal(err)
				}
				r.recordFor(500 * time.Millisecond)

				// Kill a holder; start another worker in its place.
				victim = live[1]
				r.untilBegun(victim.client)
				if err := victim.cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				live = append([]*proc{live[0], live[2]}, r.start())
				r.recordFor(3*ttl + time.Second)
			}
			for _, p := range r.procs {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
			// Drain until every worker has exited.
			go func() {
				for _, p := range r.procs {
					<-p.done
					_ = p.cmd.Wait()
				}
				close(r.events)
			}()
			for e := range r.events {
				r.record(e)
			}
			for _, p := range r.procs {
				if c := p.cmd.ProcessState.ExitCode(); c != 0 && c != -1 { // -1: killed
					t.Errorf("worker %d exited with %d", p.client, c)
				}
			}

			result := faults.Check(r.history, time.Minute)
			fenced, unfenced, err := res.Counters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %v; writes %d, fenced: %d accepted, %d stale refused, %d lost; unfenced: %d lost",
				b.name, result, r.wrote, r.accepted, r.rejected, int64(r.accepted)-fenced, int64(r.wrote)-unfenced)
			if !result.OK() {
				t.Errorf("history check failed: %v", result)
			}
			if fenced != int64(r.accepted) {
				t.Errorf("fenced counter %d after %d accepted writes: an update was lost", fenced, r.accepted)
			}
			if pausesCaught != rounds() {
				t.Errorf("the lock moved on in %d of %d pauses past the TTL", pausesCaught, rounds())
			}
			if r.rejected == 0 {
				t.Errorf("no stale write was refused: the paused holders' writes went through")
			}
		})
	}
}
