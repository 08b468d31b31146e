package faults_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dlockhq/dlock"
	etcdlock "github.com/dlockhq/dlock/adapters/etcd"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/faults"
	"github.com/dlockhq/dlock/internal/servers"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/internal/testenv/etcdenv"
	"github.com/dlockhq/dlock/migrations"
	"github.com/dlockhq/dlock/tablelock"
)

// ttl is the lease of every worker unless envTTL says otherwise: a paused
// or killed holder loses its lock this long after its last renewal.
const ttl = time.Second

// The worker's environment.
const (
	envBackend  = "DLOCK_FAULT_BACKEND"
	envName     = "DLOCK_FAULT_NAME"
	envClient   = "DLOCK_FAULT_CLIENT"
	envResource = "DLOCK_FAULT_RESOURCE"
	envTTL      = "DLOCK_FAULT_TTL"
	// envChains is how many call chains (goroutines) of a worker share
	// its Locker; 1 unless set.
	envChains = "DLOCK_FAULT_CHAINS"
	// envResourceDSN is the resource's database, which no fault touches.
	envResourceDSN = "DLOCK_FAULT_RESOURCE_DSN"
	// envElection, when set, makes the worker campaign in an election
	// (package election) instead of locking: a grant is a Campaign won,
	// a token a term, a release a Resign.
	envElection = "DLOCK_FAULT_ELECTION"
)

func TestMain(m *testing.M) {
	if b := os.Getenv(envBackend); b != "" {
		os.Exit(worker(b))
	}
	testenv.Main(m)
}

// backends are the lockers under test, each made in a worker process
// from the servers' default addresses (or their environment overrides).
var backends = []struct {
	name string
	new  func(ttl time.Duration) (dlock.Locker, func(), error)
	// needs lists the servers the parent checks before starting workers.
	needs func(testing.TB)
	// server is the server the lock talks to, for network faults.
	server string
}{
	{"tablelock/postgres", sqlLocker("pgx", tablelock.New), needPostgres, "postgres"},
	{"tablelock/mysql", sqlLocker("mysql", tablelock.New), needMySQL, "mysql"},
	{"advisory/postgres", sqlLocker("pgx", advisory.New), needPostgres, "postgres"},
	{"advisory/mysql", sqlLocker("mysql", advisory.New), needMySQL, "mysql"},
	{"redis", func(ttl time.Duration) (dlock.Locker, func(), error) {
		c := redis.NewClient(&redis.Options{Addr: servers.RedisAddr()})
		l, err := redislock.New(c, dlock.WithTTL(ttl))
		return l, func() { c.Close() }, err
	}, func(t testing.TB) { testenv.RedisAddr(t) }, "redis"},
	// The fair lock's client keeps each command's ctx deadline, as the
	// package doc advises, so dlock makes its requests on the caller's
	// goroutine; New's row keeps go-redis's default, and dlock's workers.
	{"redis/fair", func(ttl time.Duration) (dlock.Locker, func(), error) {
		c := redis.NewClient(&redis.Options{Addr: servers.RedisAddr(), ContextTimeoutEnabled: true})
		l, err := redislock.NewFair(c, dlock.WithTTL(ttl))
		return l, func() { c.Close() }, err
	}, func(t testing.TB) { testenv.RedisAddr(t) }, "redis"},
	{"zk", func(ttl time.Duration) (dlock.Locker, func(), error) {
		conn, _, err := zk.Connect(servers.ZKAddrs(), ttl, zk.WithLogger(stderrLogger{}), zk.WithLogInfo(true))
		if err != nil {
			return nil, nil, err
		}
		l, err := zklock.New(conn, zkRoot, dlock.WithTTL(ttl))
		return l, conn.Close, err
	}, func(t testing.TB) { testenv.ZK(t, testenv.ZKAddrs(t), ttl) }, "zk"},
	{"etcd", func(ttl time.Duration) (dlock.Locker, func(), error) {
		c, err := clientv3.New(clientv3.Config{Endpoints: servers.EtcdEndpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, err
		}
		l, err := etcdlock.New(c, etcdRoot, dlock.WithTTL(ttl))
		return l, func() { c.Close() }, err
	}, func(t testing.TB) { etcdenv.Client(t, etcdenv.Endpoints()) }, "etcd"},
}

// etcdRoot is the workers' etcd key prefix.
const etcdRoot = "dlock-faults"

// zkRoot is the workers' ZooKeeper root.
const zkRoot = "/dlock-faults"

// stderrLogger writes go-zookeeper's log to the worker's stderr, with the
// time: which server a worker reached and when it lost it, shown with a
// failed test.
type stderrLogger struct{}

func (stderrLogger) Printf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s zk: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func needPostgres(t testing.TB) { testenv.Migrated(t, testenv.Postgres) }
func needMySQL(t testing.TB)    { testenv.Migrated(t, testenv.MySQL) }

func sqlLocker[L dlock.Locker](driver string, newLocker func(*sql.DB, ...dlock.Option) (L, error)) func(time.Duration) (dlock.Locker, func(), error) {
	return func(ttl time.Duration) (dlock.Locker, func(), error) {
		dsn := servers.PostgresDSN()
		if driver == "mysql" {
			dsn = servers.MySQLDSN()
		}
		db, err := sql.Open(driver, dsn)
		if err != nil {
			return nil, nil, err
		}
		l, err := newLocker(db, dlock.WithTTL(ttl))
		return l, func() { db.Close() }, err
	}
}

// chainStride numbers call chains: chain c of worker w is client
// w + c*chainStride in the history, so chain 0 is the worker's own number.
const chainStride = 1000

// line is one record a worker writes to stdout.
type line struct {
	// Ready: the worker handles SIGUSR1 and SIGUSR2 from now on. It is
	// the worker's first line: the Go runtime drops a SIGUSR1 that comes
	// before signal.Notify, so the parent waits for it before it asks.
	Ready bool `json:"ready,omitempty"`
	// Chain is the call chain of the worker that wrote the line.
	Chain int        `json:"chain,omitempty"`
	Op    *faults.Op `json:"op,omitempty"`
	// Begun: the worker read the resource as a holder (a pause now
	// catches it between read and write).
	Begun bool `json:"begun,omitempty"`
	// Stopped: asked to (SIGUSR1), the worker stops itself with SIGSTOP
	// right after this read, before its write.
	Stopped bool `json:"stopped,omitempty"`
	// Long: asked to (SIGUSR2), the worker holds this section until its
	// lease ends or for envLongHold, instead of the usual 20ms.
	Long bool `json:"long,omitempty"`
	// Wrote: the worker wrote the resource; Accepted says whether the
	// fenced write was applied.
	Wrote    bool `json:"wrote,omitempty"`
	Accepted bool `json:"accepted,omitempty"`
	// At is when the worker finished writing (Now).
	At int64 `json:"at,omitempty"`
}

// section is one holder's critical section, from its read of the
// resource to its write, and how its lease ended.
type section struct {
	client     int
	token      uint64
	begin, end int64
	release    faults.Outcome // "" when the holder never unlocked (killed)
	done       int64          // when the holder saw its lease end, if before Unlock
	paused     bool           // the holder was frozen (SIGSTOP) in it
}

// worker is the child process: lock, read the resource, write it, unlock,
// until SIGTERM, recording every call on stdout.
func worker(backend string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	var stopRequested, longRequested atomic.Bool
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	go func() {
		for range usr2 {
			longRequested.Store(true)
		}
	}()
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			stopRequested.Store(true)
		}
	}()
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	client, _ := strconv.Atoi(os.Getenv(envClient))
	name := os.Getenv(envName)
	leaseTTL := ttl
	if d, err := time.ParseDuration(os.Getenv(envTTL)); err == nil {
		leaseTTL = d
	}
	var locker dlock.Locker
	var closeLocker func()
	for _, b := range backends {
		if b.name == backend {
			l, c, err := b.new(leaseTTL)
			if err != nil {
				return fail(err)
			}
			locker, closeLocker = l, c
		}
	}
	if mk := sentinelBackends[backend]; mk != nil {
		l, c, err := mk(leaseTTL)
		if err != nil {
			return fail(err)
		}
		locker, closeLocker = l, c
	}
	if locker == nil {
		return fail(fmt.Errorf("unknown backend %q", backend))
	}
	defer closeLocker()
	if os.Getenv(envElection) != "" {
		locker = campaigner{locker}
	}
	db, err := sql.Open("pgx", os.Getenv(envResourceDSN))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	res := faults.OpenResource(db, os.Getenv(envResource))
	out := json.NewEncoder(os.Stdout) // unbuffered: each line is one write
	var outMu sync.Mutex
	if err := out.Encode(line{Ready: true}); err != nil {
		return fail(err)
	}
	chains := 1
	if n, err := strconv.Atoi(os.Getenv(envChains)); err == nil && n > 0 {
		chains = n
	}
	var wg sync.WaitGroup
	for chain := range chains {
		wg.Add(1)
		go func() {
			defer wg.Done()
			emit := func(l line) {
				l.Chain = chain
				outMu.Lock()
				defer outMu.Unlock()
				if err := out.Encode(l); err != nil {
					os.Exit(3)
				}
			}
			if err := holdLoop(ctx, locker, res, name, client+chain*chainStride, leaseTTL, emit, &stopRequested, &longRequested); err != nil {
				os.Exit(fail(err))
			}
		}()
	}
	wg.Wait()
	return 0
}

// holdLoop is one call chain of a worker: lock, read the resource, write
// it, unlock, until ctx ends, recording every call with emit as client.
func holdLoop(ctx context.Context, locker dlock.Locker, res *faults.Resource, name string, client int, leaseTTL time.Duration,
	emit func(line), stopRequested, longRequested *atomic.Bool) error {
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
		var doneAt atomic.Int64 // when this worker saw the lease's Done close
		go func(lease dlock.Lease) {
			<-lease.Done()
			doneAt.Store(faults.Now())
		}(lease)
		op.Outcome, op.Token = faults.OK, lease.Token()
		emit(line{Op: &op})

		snap, err := res.Begin(bg, lease.Token())
		if err != nil {
			return err
		}
		long := longRequested.Swap(false)
		if stopRequested.Swap(false) {
			emit(line{Begun: true, Stopped: true})
			_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		} else {
			emit(line{Begun: true, Long: long})
		}
		work := 20 * time.Millisecond // the work a holder does
		if long {
			work = 2 * leaseTTL
		}
		select {
		case <-time.After(work):
		case <-lease.Done(): // a holder stops when its lease ends
		}
		accepted, err := res.Commit(bg, snap)
		if err != nil {
			return err
		}
		emit(line{Wrote: true, Accepted: accepted, At: faults.Now()})

		op = faults.Op{Client: client, Kind: faults.Release, Call: faults.Now()}
		op.Done = doneAt.Load()
		select {
		case <-lease.Done():
			if op.Done == 0 { // closed; its goroutine has not run yet
				op.Done = op.Call
			}
		default:
			op.Done = 0
		}
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
	return nil
}

// proc is a running worker.
type proc struct {
	client int
	proxy  *toxiproxy.Proxy // between the worker and the lock's server, for network faults
	cmd    *exec.Cmd
	stderr testenv.Buffer
	ready  chan struct{} // closed at the worker's Ready line
	done   chan struct{} // stdout read to the end
}

// event is a line of worker proc, from its call chain client (see
// chainStride).
type event struct {
	proc   int
	client int
	line   line
}

// run is one backend's fault run: workers contending for one name, and
// the faults the parent injects into them.
type run struct {
	t        *testing.T
	backend  string
	name     string
	env      []string
	server   string // when set, each worker reaches it through its own proxy
	res      *faults.Resource
	live     []*proc // workers not killed
	events   chan event
	mu       sync.Mutex
	procs    []*proc
	history  []faults.Op
	sections []*section
	open     map[int]*section  // each client's latest section
	grant    map[int]faults.Op // each client's latest grant
	wrote    int               // commits made (each an unfenced increment)
	accepted int               // fenced writes applied
	rejected int               // fenced writes refused: the writer's token was stale
	// diagnose, when set, logs the server's side of a run that is stuck.
	diagnose func()
}

func (r *run) start() *proc {
	r.mu.Lock()
	p := &proc{client: len(r.procs), ready: make(chan struct{}), done: make(chan struct{})}
	r.procs = append(r.procs, p)
	r.mu.Unlock()
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(),
		envBackend+"="+r.backend, envName+"="+r.name, envResource+"="+r.name,
		envClient+"="+strconv.Itoa(p.client), envResourceDSN+"="+testenv.DSN("pgx"))
	p.cmd.Env = append(p.cmd.Env, r.env...)
	if r.server != "" {
		p.proxy = newProxy(r.t, upstream(r.t, r.server))
		p.cmd.Env = append(p.cmd.Env, via(r.t, r.server, p.proxy.Listen))
	}
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
			if l.Ready {
				close(p.ready)
				continue
			}
			r.events <- event{p.client, p.client + l.Chain*chainStride, l}
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
		op := *e.line.Op
		r.history = append(r.history, op)
		switch {
		case op.Kind == faults.Acquire && op.Outcome == faults.OK:
			r.grant[e.client] = op
		case op.Kind == faults.Release && r.open[e.client] != nil:
			r.open[e.client].release = op.Outcome
			r.open[e.client].done = op.Done
			if op.Done == 0 && op.Outcome == faults.Lost {
				r.open[e.client].done = op.Return // told by Unlock
			}
			delete(r.open, e.client)
		}
	case e.line.Begun:
		// The section begins, at the latest, when Lock returned: the read
		// itself is somewhere between that and At.
		g := r.grant[e.client]
		sec := &section{client: e.client, token: g.Token, begin: g.Return, end: math.MaxInt64}
		r.sections = append(r.sections, sec)
		r.open[e.client] = sec
	case e.line.Wrote:
		if sec := r.open[e.client]; sec != nil {
			sec.end = e.line.At
		}
		r.wrote++
		if e.line.Accepted {
			r.accepted++
		} else {
			r.rejected++
		}
	}
}

// untilBegun records events until worker client (any, if -1) has read
// the resource as a holder, through any of its call chains.
func (r *run) untilBegun(client int) {
	deadline := time.After(dlocktest.Timeout)
	for {
		select {
		case e := <-r.events:
			r.record(e)
			if (client < 0 || e.proc == client) && e.line.Begun {
				return
			}
		case <-deadline:
			r.stuck(r.procs[max(client, 0)])
		}
	}
}

// stuck fails the test for worker p, which never got the lock, after
// asking every worker (SIGQUIT) to write every goroutine's stack to its
// stderr, which the test then shows, and running diagnose.
func (r *run) stuck(p *proc) {
	for _, w := range r.live {
		_ = w.cmd.Process.Signal(syscall.SIGQUIT)
	}
	if r.diagnose != nil {
		r.diagnose()
	}
	time.Sleep(time.Second)
	r.t.Fatalf("worker %d never held the lock", p.client)
}

// holdLong asks worker p to hold its next section long (until its lease
// ends, or two TTLs) and records events until it has begun it.
func (r *run) holdLong(p *proc) {
	_ = r.ask(p, syscall.SIGUSR2, func(l line) bool { return l.Long })
}

// stopInHold makes worker p stop itself (SIGSTOP) right after its next
// read of the resource as a holder, before its write, and records events
// until it has. The parent could not time a SIGSTOP into that window
// itself: a line from the worker may reach it after the window closed.
func (r *run) stopInHold(p *proc) {
	r.markPaused(r.ask(p, syscall.SIGUSR1, func(l line) bool { return l.Stopped }))
}

// ask sends worker p sig and records events until p writes a line that
// answers it (done); it returns the call chain that wrote it.
func (r *run) ask(p *proc, sig syscall.Signal, done func(line) bool) int {
	deadline := time.After(dlocktest.Timeout)
	for waiting := true; waiting; {
		select {
		case <-p.ready:
			waiting = false
		case e := <-r.events:
			r.record(e)
		case <-deadline:
			r.stuck(p)
		}
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		r.t.Fatal(err)
	}
	for {
		select {
		case e := <-r.events:
			r.record(e)
			if e.proc == p.client && done(e.line) {
				return e.client
			}
		case <-deadline:
			r.stuck(p)
		}
	}
}

// markPaused marks client's current grant and section as frozen: its
// lease may be overtaken while it cannot run (see faults.Op.Paused).
func (r *run) markPaused(client int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if sec := r.open[client]; sec != nil {
		sec.paused = true
	}
	g := r.grant[client]
	for i := len(r.history) - 1; i >= 0; i-- {
		if op := &r.history[i]; op.Kind == faults.Acquire && op.Client == client && op.Token == g.Token && op.Outcome == faults.OK {
			op.Paused = true
			return
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

// recordUntil records events until ready reports true (checked every
// 100ms), for at most dlocktest.Timeout.
func (r *run) recordUntil(ready func() bool) {
	deadline := time.Now().Add(dlocktest.Timeout)
	for !ready() {
		if time.Now().After(deadline) {
			r.t.Fatal("not ready within " + dlocktest.Timeout.String())
		}
		r.recordFor(100 * time.Millisecond)
	}
}

// grantsSince counts grants to workers other than client after t.
func (r *run) grantsSince(client int, t int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, op := range r.history {
		if op.Kind == faults.Acquire && op.Outcome == faults.OK && op.Client%chainStride != client && op.Call > t {
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

// newRun creates the resource and starts n workers of backend with env
// added to their environment.
func newRun(t *testing.T, backend string, n int, env ...string) *run {
	return newRunVia(t, backend, "", n, env...)
}

// newRunVia is newRun with each worker reaching server (when not "")
// through a proxy of its own.
func newRunVia(t *testing.T, backend, server string, n int, env ...string) *run {
	name := dlocktest.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := faults.NewResource(ctx, testenv.Postgres(t), name)
	if err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, backend: backend, name: name, env: env, server: server, res: res, events: make(chan event, 1024),
		open: map[int]*section{}, grant: map[int]faults.Op{}}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range r.procs {
				t.Logf("worker %d stderr:\n%s", p.client, p.stderr.String())
			}
		}
	})
	for range n {
		r.live = append(r.live, r.start())
	}
	return r
}

// finish stops the workers, then checks the history (linearizable, tokens
// increase), the critical sections (a section overtaken by the next one
// belongs to a holder that was told its lease ended, or died) and the
// resource (the fenced counter lost no accepted write). It logs the
// summary line of the run.
func (r *run) finish() { r.check(true) }

// tally is what one run counted.
type tally struct {
	overtaken                 int           // sections another began before they ended
	overlaps                  int           // of those, the ones that broke the lease rule (the holder's Done was open)
	longest                   time.Duration // the longest a successor held before such a holder knew
	regressions               int           // grants whose token was not above an earlier grant's
	wrote, accepted, rejected int
	unfencedLost              int64
}

// check stops the workers and checks what they recorded. With strict,
// any overlap that breaks the lease rule fails the test; without (a
// failover to an asynchronous replica, which can lose a grant), overlaps
// are counted, and only token regressions and lost fenced writes fail it.
func (r *run) check(strict bool) tally {
	t := r.t
	for _, p := range r.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	go func() { // drain until every worker has exited
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
		c := p.cmd.ProcessState.ExitCode()
		switch {
		case c == 0 || c == -1: // -1: killed
		case c == raceExit && onlyUpstreamRaces(p.stderr.String()):
			t.Logf("worker %d: the race detector reported only go-zookeeper's own race on reconnect (go-zookeeper/zk PR #35, unfixed in v1.0.4); its stderr:\n%s", p.client, p.stderr.String())
		default:
			t.Errorf("worker %d exited with %d", p.client, c)
		}
	}
	result := faults.Check(r.history, time.Minute)
	regressions := faults.TokenOrder(r.history)
	fenced, unfenced, err := r.res.Counters(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	overtaken, unreported, broken := r.overlaps()
	releases := map[faults.Outcome]int{}
	for _, op := range r.history {
		if op.Kind == faults.Release {
			releases[op.Outcome]++
		}
	}
	n := tally{overtaken: overtaken, overlaps: len(broken),
		regressions: len(regressions), wrote: r.wrote, accepted: r.accepted, rejected: r.rejected,
		unfencedLost: int64(r.wrote) - unfenced}
	t.Logf("%s: %d ops checked, linearizable: %s, violations: %d; token regressions: %d; releases %v; "+
		"%d sections overtaken, %d unreported; writes %d: fenced %d accepted, %d stale refused, %d lost; unfenced %d lost; "+
		"%d grants followed one to another chain of the same worker",
		t.Name(), result.Ops, result.Linearizable, len(result.Violations)+len(unreported), n.regressions, releases, overtaken, len(unreported),
		r.wrote, r.accepted, r.rejected, int64(r.accepted)-fenced, n.unfencedLost, r.withinWorker())
	for _, d := range broken {
		n.longest = max(n.longest, d)
	}
	for _, g := range regressions {
		t.Errorf("token regression: %s", g)
	}
	if fenced != int64(r.accepted) {
		t.Errorf("fenced counter %d after %d accepted writes: an update was lost", fenced, r.accepted)
	}
	if !strict {
		return n
	}
	for _, u := range unreported {
		t.Errorf("unreported overlap: %s", u)
	}
	if !result.OK() {
		t.Errorf("history check failed: %v", result)
	}
	return n
}

// withinWorker counts the grants, in token order, that followed a grant to
// another call chain of the same worker: the lock passed between the
// chains of a process (handed on, where the backend can).
func (r *run) withinWorker() int {
	var grants []faults.Op
	for _, op := range r.history {
		if op.Kind == faults.Acquire && op.Outcome == faults.OK {
			grants = append(grants, op)
		}
	}
	slices.SortFunc(grants, func(a, b faults.Op) int { return cmp.Compare(a.Token, b.Token) })
	n := 0
	for i := 1; i < len(grants); i++ {
		a, b := grants[i-1].Client, grants[i].Client
		if a != b && a%chainStride == b%chainStride {
			n++
		}
	}
	return n
}

// finishRecovered records until some worker gets the lock after the
// faults (the lock works again; at most dlocktest.Timeout: sessions that
// expired while a server was frozen take some seconds to come back), and
// finishes.
func (r *run) finishRecovered() {
	since := faults.Now()
	r.recordUntil(func() bool { return r.grantsSince(-1, since) > 0 })
	r.finish()
}

// pause stops the first live worker between its read and its write for
// d, and reports whether another worker got the lock meanwhile.
func (r *run) pause(d time.Duration) bool {
	victim := r.live[0]
	r.stopInHold(victim)
	stopped := faults.Now()
	r.recordFor(d)
	movedOn := r.grantsSince(victim.client, stopped) > 0
	if err := victim.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		r.t.Fatal(err)
	}
	return movedOn
}

// kill kills the second live worker while it holds the lock, between its
// read and its write, and starts another in its place.
func (r *run) kill() {
	victim := r.live[1]
	r.stopInHold(victim)
	if err := victim.cmd.Process.Kill(); err != nil {
		r.t.Fatal(err)
	}
	r.live = append([]*proc{r.live[0], r.live[2]}, r.start())
}

// TestFaults runs, per backend, three workers in contention for one lock
// around a Resource, each with two call chains sharing its Locker (so the
// lock also passes between the chains of a worker, handed on in one
// request where the backend can); each round pauses one holder (SIGSTOP)
// past its TTL between its read and its write, then kills one (SIGKILL).
// The pause must cost the paused holder its lock (the lock moves on) and
// its write (it is refused as stale).
func TestFaults(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			b.needs(t)
			r := newRun(t, b.name, 3, envChains+"=2")
			r.recordFor(500 * time.Millisecond)
			pausesCaught := 0
			for range rounds() {
				if r.pause(3*ttl + time.Second) {
					pausesCaught++
				}
				r.recordFor(500 * time.Millisecond)
				r.kill()
				r.recordFor(3*ttl + time.Second)
			}
			// The paused worker is not locked out for good.
			r.untilBegun(r.live[0].client)
			r.finish()
			if pausesCaught != rounds() {
				t.Errorf("the lock moved on in %d of %d pauses past the TTL", pausesCaught, rounds())
			}
			if r.rejected < rounds() {
				t.Errorf("%d stale writes refused in %d pauses: a paused holder's write went through", r.rejected, rounds())
			}
		})
	}
}

// TestRedisRestart restarts a Redis server (without persistence: it
// comes back empty) while a worker holds the lock. The holder's lease is
// gone with the data; another worker may take the lock before the holder
// notices, so the holder must be told (its Unlock reports the loss), and
// tokens must keep increasing although the fencing counter was lost too.
func TestRedisRestart(t *testing.T) {
	server := testenv.RedisServers(t, 1)[0]
	r := newRun(t, "redis", 3, servers.RedisEnv+"="+server.Addr)
	for range rounds() {
		r.untilBegun(r.live[0].client)
		server.Restart(t)
		r.recordFor(3 * ttl)
	}
	r.finishRecovered()
}

// TestDatabaseRestart crashes a throwaway PostgreSQL or MariaDB server
// (PostgreSQL's immediate shutdown, MariaDB's SIGKILL) while a worker
// holds a lock on it, and starts it again: advisory locks go with their
// sessions, lock table rows and fencing counters survive crash recovery.
func TestDatabaseRestart(t *testing.T) {
	onThrowawaySQL(t, func(r *run, server *testenv.SQLServer) {
		server.Restart(r.t)
		r.recordFor(3 * ttl)
	})
}

// onThrowawaySQL runs each SQL backend against a throwaway server of its
// database, with fault done once a round while a worker holds the lock.
// Each worker runs two call chains on its Locker, so the fault also meets
// hand-offs between them, and sessions a Locker keeps between holds.
func onThrowawaySQL(t *testing.T, fault func(r *run, server *testenv.SQLServer)) {
	for _, db := range []struct {
		server   func(testing.TB) *testenv.SQLServer
		env      string
		backends []string
	}{
		{testenv.PostgresServer, servers.PostgresEnv, []string{"tablelock/postgres", "advisory/postgres"}},
		{testenv.MariaDBServer, servers.MySQLEnv, []string{"tablelock/mysql", "advisory/mysql"}},
	} {
		server := db.server(t)
		migrate(t, server)
		for _, backend := range db.backends {
			t.Run(backend, func(t *testing.T) {
				r := newRun(t, backend, 3, db.env+"="+server.DSN, envChains+"=2")
				r.recordFor(500 * time.Millisecond)
				for range rounds() {
					r.untilBegun(r.live[0].client)
					fault(r, server)
				}
				r.finishRecovered()
			})
		}
	}
}

// zkTTL is the workers' lease on the ensemble: within the session timeout
// the ensemble grants.
const zkTTL = 4 * time.Second

// logQueue logs each member's mode of ensemble e and, when all serve,
// the lock nodes of name, each with its session and creation time.
func logQueue(t *testing.T, e *testenv.ZKEnsemble, name string) {
	serving := true
	for i, addr := range e.Addrs {
		mode := e.Mode(i)
		serving = serving && (mode == "leader" || mode == "follower")
		t.Logf("%s: %s", addr, cmp.Or(mode, "not serving"))
	}
	if !serving {
		return // no session to be had; testenv.ZK would fail the test on that instead
	}
	c := testenv.ZK(t, e.Addrs, 10*time.Second)
	dir := zkRoot + "/" + strings.ReplaceAll(name, ".", "%2E")
	nodes, _, err := c.Children(dir)
	t.Logf("%s lock nodes: %v (%v)", time.Now().Format("15:04:05.000"), nodes, err)
	for _, n := range nodes {
		if _, st, err := c.Get(dir + "/" + n); err == nil {
			t.Logf("%s: session %#x, created %s", n, st.EphemeralOwner, time.UnixMilli(st.Ctime).Format("15:04:05.000"))
		}
	}
}

// TestZKEnsembleRestart kills a follower and then the leader of the
// 3-node ensemble, restarting each and waiting until it serves again (a
// member answers on its port before it has rejoined the quorum), then
// kills both for longer than two TTLs, so the quorum is lost and sessions
// expire, and restarts them. Sessions that survive keep
// their locks; those that expire tell their holders first.
func TestZKEnsembleRestart(t *testing.T) {
	e := testenv.StartZKEnsemble(t)
	defer e.Restart(t)
	r := newRun(t, "zk", 3, servers.ZKEnv+"="+strings.Join(e.Addrs, ","), envTTL+"="+zkTTL.String())
	r.diagnose = func() { logQueue(t, e, r.name) }
	killMembers(t, r, members{
		leader:  e.Leader,
		kill:    func(i int) { e.Kill(t, i) },
		restart: func() { e.Restart(t) },
		serving: e.Serving,
	}, zkTTL)
}

// members is a 3-member ensemble or cluster, as killMembers drives it.
type members struct {
	leader  func() int // the leading member's index, or -1
	kill    func(i int)
	restart func() // starts every stopped member
	serving func() bool
}

// killMembers is the rounds of the ensemble and cluster rows: a follower
// killed, then the leader, each restarted and waited for until it serves;
// then two of three killed for two TTLs (the quorum lost) and restarted.
func killMembers(t *testing.T, r *run, m members, ttl time.Duration) {
	t.Helper()
	leader := func() int {
		i := m.leader()
		if i < 0 {
			t.Fatal("no leader")
		}
		return i
	}
	for range rounds() {
		for _, who := range []string{"follower", "leader"} {
			victim := leader()
			if who == "follower" {
				victim = (victim + 1) % 3
			}
			r.untilBegun(r.live[0].client)
			m.kill(victim)
			r.recordFor(3 * time.Second)
			m.restart()
			r.recordUntil(m.serving)
		}
		l := leader()
		r.untilBegun(r.live[0].client)
		m.kill(l)
		m.kill((l + 1) % 3)
		r.recordFor(2*ttl + time.Second)
		m.restart()
		r.recordUntil(m.serving)
	}
	r.finishRecovered()
}

// etcdTTL is the workers' lease on the cluster: above the time a new
// leader takes to be elected (etcd's default election timeout is 1 s).
const etcdTTL = 4 * time.Second

// TestEtcdClusterRestart kills a follower and then the leader of the
// 3-member cluster, restarting each and waiting for a leader, then kills
// two members for longer than two TTLs, so the quorum is lost, and
// restarts them. Holders keep their leases through a new election (the
// new leader extends every lease); with the quorum lost nothing is
// renewed or granted, and holders let go at their deadlines.
func TestEtcdClusterRestart(t *testing.T) {
	c := etcdenv.StartCluster(t)
	defer c.Restart(t)
	r := newRun(t, "etcd", 3, servers.EtcdEnv+"="+strings.Join(c.Endpoints, ","), envTTL+"="+etcdTTL.String())
	killMembers(t, r, members{
		leader:  func() int { return c.Leader(t) },
		kill:    func(i int) { c.Kill(t, i) },
		restart: func() { c.Restart(t) },
		serving: func() bool { return c.Leader(t) >= 0 },
	}, etcdTTL)
}

// TestFrozenServer freezes the lock's server (SIGSTOP of every process,
// every member of a ZooKeeper ensemble) for longer than the TTL while a
// worker holds the lock, then lets it go on. Requests hang rather than
// fail; the holder's Done must close at its own deadline all the same,
// before the thawed server can expire the lease and grant it to another.
func TestFrozenServer(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		server := testenv.RedisServers(t, 1)[0]
		r := newRun(t, "redis", 3, servers.RedisEnv+"="+server.Addr)
		for range rounds() {
			r.untilBegun(r.live[0].client)
			server.Freeze()
			r.recordFor(3 * ttl)
			server.Thaw()
			r.recordFor(ttl)
		}
		r.finishRecovered()
	})
	onThrowawaySQL(t, func(r *run, server *testenv.SQLServer) {
		server.Freeze()
		r.recordFor(3 * ttl)
		server.Thaw()
		r.recordFor(ttl)
	})
	t.Run("zk-ensemble", func(t *testing.T) {
		e := testenv.StartZKEnsemble(t)
		defer e.Restart(t)
		r := newRun(t, "zk", 3, servers.ZKEnv+"="+strings.Join(e.Addrs, ","), envTTL+"="+zkTTL.String())
		r.diagnose = func() { logQueue(t, e, r.name) }
		for range rounds() {
			r.untilBegun(r.live[0].client)
			for i := range e.Addrs {
				e.Freeze(t, i)
			}
			r.recordFor(2*zkTTL + time.Second)
			for i := range e.Addrs {
				e.Thaw(t, i)
			}
			r.recordUntil(e.Serving)
		}
		r.finishRecovered()
	})
}

// migrate brings a throwaway server's schema up.
func migrate(t *testing.T, server *testenv.SQLServer) {
	t.Helper()
	conn, err := sql.Open(server.Driver, server.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := migrations.Up(context.Background(), conn); err != nil {
		t.Fatal(err)
	}
}

// overlaps counts the critical sections that another began before they
// ended, and describes the overlaps that break the lease rule: the older
// holder (the smaller token), neither frozen nor killed, had not seen its
// lease's Done close when the newer holder's Lock returned (its Unlock
// reporting the loss later does not count).
//
// broken maps each older section whose lease rule was broken to the
// longest time a successor held beside it before its holder knew.
func (r *run) overlaps() (n int, unreported []string, broken map[*section]time.Duration) {
	broken = map[*section]time.Duration{}
	secs := slices.Clone(r.sections)
	slices.SortFunc(secs, func(a, b *section) int { return cmp.Compare(a.begin, b.begin) })
	for i, a := range secs {
		overtaken := false
		for _, b := range secs[i+1:] {
			if b.begin >= a.end {
				break
			}
			overtaken = true
			older := a
			if b.token < a.token {
				older = b
			}
			newer := a
			if older == a {
				newer = b
			}
			switch {
			case older.paused || older.release == "" || older.release == faults.Unknown:
			case older.release == faults.OK:
				unreported = append(unreported, fmt.Sprintf("client %d (token %d) and client %d (token %d), and client %d's Unlock succeeded",
					a.client, a.token, b.client, b.token, older.client))
				broken[older] = max(broken[older], time.Duration(older.end-newer.begin))
			case older.done > newer.begin:
				unreported = append(unreported, fmt.Sprintf("client %d (token %d) was granted %v before client %d (token %d) saw its lease end",
					newer.client, newer.token, time.Duration(older.done-newer.begin), older.client, older.token))
				broken[older] = max(broken[older], time.Duration(older.done-newer.begin))
			}
		}
		if overtaken {
			n++
		}
	}
	return n, unreported, broken
}

// newProxy starts a TCP proxy on loopback to upstream (toxiproxy, in this
// process); t.Cleanup stops it.
func newProxy(t *testing.T, upstream string) *toxiproxy.Proxy {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "dlock", "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	return p
}

// upstream is the address of server ("postgres", "mysql", "redis", "zk").
func upstream(t *testing.T, server string) string {
	switch server {
	case "postgres":
		u, err := url.Parse(testenv.DSN("pgx"))
		if err != nil {
			t.Fatal(err)
		}
		return u.Host
	case "mysql":
		cfg, err := mysql.ParseDSN(testenv.DSN("mysql"))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Addr
	case "redis":
		return servers.RedisAddr()
	case "etcd":
		return servers.EtcdEndpoints()[0]
	default:
		return servers.ZKAddrs()[0]
	}
}

// via is the environment variable that sends a worker to server through
// the proxy at addr.
func via(t *testing.T, server, addr string) string {
	switch server {
	case "postgres":
		u, err := url.Parse(testenv.DSN("pgx"))
		if err != nil {
			t.Fatal(err)
		}
		u.Host = addr
		return servers.PostgresEnv + "=" + u.String()
	case "mysql":
		cfg, err := mysql.ParseDSN(testenv.DSN("mysql"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.Addr = addr
		return servers.MySQLEnv + "=" + cfg.FormatDSN()
	case "redis":
		return servers.RedisEnv + "=" + addr
	case "etcd":
		return servers.EtcdEnv + "=" + addr
	default:
		return servers.ZKEnv + "=" + addr
	}
}

// toxic adds a toxic to p in both directions; the returned func removes it.
func toxic(t *testing.T, p *toxiproxy.Proxy, kind string, attributes map[string]int) func() {
	var names []string
	for _, stream := range []string{"upstream", "downstream"} {
		name := kind + "_" + stream
		spec, err := json.Marshal(map[string]any{"name": name, "type": kind, "stream": stream, "attributes": attributes})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Toxics.AddToxicJson(bytes.NewReader(spec)); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return func() {
		for _, name := range names {
			if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
				t.Error(err)
			}
		}
	}
}

// TestHandOffsUnderNetworkFaults runs one worker with two call chains on
// its Locker, so that no other process waits and every backend that can
// hands each hold straight to the other chain (on the lock table, the
// fair Redis lock and ZooKeeper only then), while its link gets latency
// and its connections are reset mid-hand-off. The history is checked as
// in every run: tokens increase, no grant while the last holder's Done
// is open, no accepted write lost.
func TestHandOffsUnderNetworkFaults(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			b.needs(t)
			r := newRunVia(t, b.name, b.server, 1, envChains+"=2")
			worker := r.live[0]
			for range rounds() {
				r.recordFor(500 * time.Millisecond)
				heal := toxic(t, worker.proxy, "latency", map[string]int{"latency": 100, "jitter": 50})
				r.recordFor(2 * time.Second)
				heal()
				for range 3 {
					r.untilBegun(worker.client)
					toxic(t, worker.proxy, "reset_peer", map[string]int{"timeout": 0})()
					r.recordFor(500 * time.Millisecond)
				}
			}
			r.untilBegun(worker.client)
			r.finish()
			if n := r.withinWorker(); n == 0 {
				t.Errorf("no grant passed from one chain of the worker to the other")
			}
		})
	}
}

// TestNetworkFaults puts a proxy between each worker and the lock's
// server and, per backend: adds latency to every worker's link, resets
// the holder's connections, then cuts the holder off (its packets are
// dropped) for longer than its TTL, so the lock must move on. Each worker
// runs two call chains on its Locker, so hand-offs between them meet
// every fault too.
func TestNetworkFaults(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			b.needs(t)
			r := newRunVia(t, b.name, b.server, 3, envChains+"=2")
			cutsCaught := 0
			for range rounds() {
				r.recordFor(500 * time.Millisecond)
				var heal []func()
				for _, p := range r.live {
					heal = append(heal, toxic(t, p.proxy, "latency", map[string]int{"latency": 100, "jitter": 50}))
				}
				r.recordFor(2 * time.Second)
				for _, h := range heal {
					h()
				}

				holder := r.live[0]
				r.untilBegun(holder.client)
				toxic(t, holder.proxy, "reset_peer", map[string]int{"timeout": 0})()
				r.recordFor(time.Second)

				r.untilBegun(holder.client)
				heal1 := toxic(t, holder.proxy, "timeout", map[string]int{"timeout": 0})
				cut := faults.Now()
				r.recordFor(3*ttl + time.Second)
				if r.grantsSince(holder.client, cut) > 0 {
					cutsCaught++
				}
				heal1()
				r.recordFor(time.Second)
			}
			// The cut-off worker is not locked out for good.
			r.untilBegun(r.live[0].client)
			r.finish()
			if cutsCaught != rounds() {
				t.Errorf("the lock moved on in %d of %d cuts longer than the TTL", cutsCaught, rounds())
			}
		})
	}
}
