// Command dlock is the operators' command for dlock's locks: it looks at
// a lock, runs a command under one, and keeps the SQL schema.
//
//	dlock ls [--limit 1000] [PREFIX]   the locks held under PREFIX, a line each, with their waiters
//	dlock inspect NAME                 who holds NAME: owner, token, TTL left, age, payload
//	dlock watch [--interval 1s] NAME   a line each time NAME's holder changes
//	dlock release [--yes] NAME         take NAME from its holder (asks first)
//	dlock run [--ttl 30s] [--timeout 0] [--grace 10s] [--payload TEXT] NAME -- CMD ARGS...
//	dlock migrate up [N]|down N|force V|version|status
//	                                   the SQL backends' schema (package migrations),
//	                                   as golang-migrate's CLI keeps it
//	dlock prune [--idle 24h]           delete idle lock rows (SQL backends)
//
// Every subcommand takes --url (default $DLOCK_URL): postgres://…,
// mysql://user:pass@host:3306/db, redis://host:6379/0,
// zk://host:2181,host:2182/root or etcd://host:2379,host:2380/prefix;
// --lock tablelock|advisory picks the lock of a SQL URL (default
// tablelock); --json prints JSON lines instead of text.
//
// dlock run takes NAME, waiting up to --timeout (0: as long as it takes),
// with --payload (who and why) stored beside the hold where the backend
// keeps one (dlock.WithPayload; ls and inspect show it), then runs CMD
// with DLOCK_NAME, DLOCK_TOKEN and DLOCK_OWNER in its environment, so the
// command can fence what it writes with the token. CMD runs in a process
// group of its own (so it cannot read a terminal), and nothing of it
// outlives dlock run: if the lease is lost, or dlock gets SIGINT or
// SIGTERM, the whole group (CMD and every process it started) gets
// SIGTERM, and SIGKILL --grace later; processes CMD leaves behind when it
// exits are stopped the same way before the lock is released; and if
// dlock itself dies, SIGKILL included, the group is killed at once, as
// nothing renews the lease any more. Exit status: CMD's (128+N for a
// signal N); 1 when the lock was not acquired, or the lease was lost and
// CMD exited 0 all the same; 2 for bad arguments; 127 when CMD could not
// start. dlock releases the lock once the group is gone.
//
// dlock release takes a lock from a holder that is stuck but still
// renewing (dlock.ForceReleaser): the next waiter is granted at once,
// with a larger token, while the evicted holder learns it only at its
// next renewal, so its late writes are safe only where the resource
// checks the token. It asks for confirmation unless --yes, and logs the
// eviction on stderr.
//
// No subcommand waits for a server that does not answer: ls, inspect,
// migrate and prune end at --timeout (10s when 0), each request of watch
// and release at --timeout, and run's first request at 10s (its --timeout
// is the wait for the lock), each with one line and status 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/dlockhq/dlock"
)

const usage = `usage:
  dlock ls [flags] [--limit 1000] [PREFIX]
  dlock inspect [flags] NAME
  dlock watch [flags] [--interval 1s] NAME
  dlock release [flags] [--yes] NAME
  dlock run [flags] [--ttl 30s] [--timeout 0] [--grace 10s] NAME -- CMD [ARGS...]
  dlock migrate [flags] up [N]|down N|force V|version|status
  dlock prune [flags] [--idle 24h]
  dlock help [SUBCOMMAND]            this, or a subcommand's flags (also -h, --help)
flags: --url URL (default $DLOCK_URL) --lock tablelock|advisory --json`

func main() {
	superviseIfAsked()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// say prints err as dlock's one line, "dlock: " once: the library's own
// errors start with it already.
func say(w io.Writer, err error) {
	fmt.Fprintln(w, "dlock:", strings.TrimPrefix(err.Error(), "dlock: "))
}

// Exit statuses of dlock's own failures.
const (
	exitFailed = 1 // the request failed, or the lease was lost
	exitUsage  = 2 // bad arguments
)

// cli runs the command line args (without the program name), and returns
// the exit status.
func cli(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// Whatever fails, no output carries the URL's password.
	secrets := argSecrets(args)
	stdout, stderr = redacting(stdout, secrets), redacting(stderr, secrets)
	if help, ok := wantsHelp(args); ok {
		return printHelp(help, stdout)
	}
	inv, err := parse(args, stderr)
	if err != nil {
		if err.Error() != "" {
			say(stderr, err)
		}
		return exitUsage
	}
	t, err := connect(inv.s, stderr)
	if err != nil {
		say(stderr, err)
		return exitUsage
	}
	defer t.shutdown()
	if inv.sub == "run" {
		// The server answers first, within the request bound: a wait for
		// the lock must not be a wait for a server that is not there.
		rctx, cancel := requestBound(ctx, 0)
		_, err := look(rctx, t, inv.rest[0])
		cancel()
		if err != nil {
			say(stderr, withCause(rctx, err))
			return exitFailed
		}
		return run(ctx, t, runSpec{name: inv.rest[0], argv: inv.rest[1:], timeout: inv.timeout, grace: inv.grace, payload: inv.payload}, stdout, stderr)
	}
	ctx, cancel := inv.bound(ctx)
	defer cancel()
	err = inv.do(ctx, t, printer{w: stdout, json: inv.json}, stderr)
	if bounded[inv.sub] {
		err = withCause(ctx, err)
	}
	if err != nil {
		say(stderr, err)
		if errors.Is(err, errUsage) {
			return exitUsage
		}
		return exitFailed
	}
	return 0
}

// do runs inv's subcommand (but run) on t.
func (inv invocation) do(ctx context.Context, t *target, out printer, stderr io.Writer) error {
	switch inv.sub {
	case "ls":
		return list(ctx, t, strings.Join(inv.rest, ""), inv.limit, out)
	case "inspect":
		return inspect(ctx, t, inv.rest[0], out)
	case "release":
		return release(ctx, t, inv.rest[0], inv.yes, inv.timeout, out, stderr)
	case "watch":
		return watch(ctx, t, inv.rest[0], inv.interval, inv.timeout, out)
	case "migrate":
		return migrate(ctx, t, inv.rest, out)
	case "prune":
		return prune(ctx, t, inv.idle, out)
	}
	return fmt.Errorf("%w: unknown subcommand %q", errUsage, inv.sub)
}

// bounded are the subcommands that end at --timeout (default
// defaultRequestTimeout) as a whole. The others bound each request
// instead: watch watches until stopped, release waits for its
// confirmation between two requests, and run's --timeout is its wait for
// the lock (its first request is bounded at defaultRequestTimeout).
var bounded = map[string]bool{"ls": true, "inspect": true, "migrate": true, "prune": true}

// defaultRequestTimeout bounds a request whose --timeout is 0.
const defaultRequestTimeout = 10 * time.Second

// bound returns ctx, ended at --timeout for a bounded subcommand, so that
// an unreachable or frozen server ends the command, not a wait.
func (inv invocation) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if !bounded[inv.sub] {
		return ctx, func() {}
	}
	return requestBound(ctx, inv.timeout)
}

// requestBound is ctx ended after d (defaultRequestTimeout when 0), its
// cause saying the server did not answer.
func requestBound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d == 0 {
		d = defaultRequestTimeout
	}
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("the server did not answer within %v (--timeout)", d))
}

// withCause is err, said as ctx's cause when ctx ended it.
func withCause(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && context.Cause(ctx) != ctx.Err() {
		return fmt.Errorf("%w: %w", context.Cause(ctx), err)
	}
	return err
}

// invocation is a parsed command line.
type invocation struct {
	sub                            string
	s                              settings
	json                           bool
	rest                           []string // the arguments after the flags
	interval, timeout, grace, idle time.Duration
	limit                          int
	yes                            bool
	payload                        string
}

// subcommands are the arguments each subcommand takes after its flags:
// at least min, at most max (-1: any number), the first a lock name when
// named.
var subcommands = map[string]struct {
	min, max int
	named    bool
}{
	"ls": {0, 1, false}, "inspect": {1, 1, true}, "watch": {1, 1, true}, "release": {1, 1, true},
	"migrate": {1, 2, false}, "prune": {0, 0, false}, "run": {2, -1, true},
}

// parse reads args; the error is what to print (empty: the usage was).
func parse(args []string, stderr io.Writer) (invocation, error) {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return invocation{}, errors.New("")
	}
	inv := invocation{sub: args[0]}
	spec, ok := subcommands[inv.sub]
	if !ok {
		return inv, fmt.Errorf("unknown subcommand %q\n%s", inv.sub, usage)
	}
	fs := flagSet(&inv, stderr)
	rest, err := interleaved(fs, args[1:])
	if err != nil {
		return inv, errors.New("") // the flag package said why
	}
	inv.rest = rest
	if inv.sub == "run" && len(inv.rest) > 1 && inv.rest[1] == "--" {
		inv.rest = append(inv.rest[:1], inv.rest[2:]...)
		if len(inv.rest) < 2 {
			return inv, errors.New("run: no command after NAME --")
		}
	}
	if n := len(inv.rest); n < spec.min || spec.max >= 0 && n > spec.max {
		return inv, errors.New(usage)
	}
	if spec.named {
		if err := dlock.ValidateName(inv.rest[0]); err != nil {
			return inv, err
		}
	}
	if err := dlock.ValidatePayload(inv.payload); err != nil {
		return inv, err
	}
	return inv, nil
}

// interleaved parses args with fs, flags before or after the arguments,
// and returns the arguments in order. Everything after "--" is an
// argument (run's command, flags included), and comes after a "--" kept
// in what interleaved returns.
func interleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		left := fs.Args()
		if consumed := len(args) - len(left); consumed > 0 && args[consumed-1] == "--" {
			return append(append(rest, "--"), left...), nil // Parse ate the "--"
		}
		switch {
		case len(left) == 0:
			return rest, nil
		case left[0] == "--":
			return append(rest, left...), nil
		}
		rest, args = append(rest, left[0]), left[1:]
	}
}

// errUsage marks an error in what the user asked for.
var errUsage = errors.New("usage")

// printer prints a result as a line of text or of JSON.
type printer struct {
	w    io.Writer
	json bool
}

func (p printer) print(v any, text string) {
	if p.json {
		b, _ := json.Marshal(v) // plain structs of strings and numbers
		fmt.Fprintln(p.w, string(b))
		return
	}
	fmt.Fprintln(p.w, text)
}

// holder is a lock's state, as inspect and watch print it.
type holder struct {
	Name    string `json:"name"`
	Held    bool   `json:"held"`
	Owner   string `json:"owner,omitempty"`
	Token   uint64 `json:"token,omitempty"`
	TTLMS   int64  `json:"ttl_ms,omitempty"`
	AgeMS   int64  `json:"age_ms,omitempty"`
	Payload string `json:"payload,omitempty"`
	// Waiters is how many wait for the lock (ls), where the backend
	// counts them.
	Waiters *int `json:"waiters,omitempty"`
	// HeldBackMS, for a free name, is how long a restarted server still
	// holds its grants back (dlock.Holder.HeldBack).
	HeldBackMS int64  `json:"held_back_ms,omitempty"`
	At         string `json:"at"`
}

func (h holder) String() string {
	if !h.Held && h.HeldBackMS > 0 {
		return fmt.Sprintf("%s %s is free, but the server restarted lately and grants it again in %v (dlock.ErrHeldBack)", h.At, h.Name, time.Duration(h.HeldBackMS)*time.Millisecond)
	}
	if !h.Held {
		return fmt.Sprintf("%s %s is free", h.At, h.Name)
	}
	line := fmt.Sprintf("%s %s is held by %s, token %d, %v left", h.At, h.Name, h.Owner, h.Token, time.Duration(h.TTLMS)*time.Millisecond)
	if h.TTLMS == 0 { // a session's lock (ZooKeeper, advisory): no expiry of its own
		line = fmt.Sprintf("%s %s is held by %s, token %d, until its session ends", h.At, h.Name, h.Owner, h.Token)
	}
	if h.AgeMS > 0 {
		line += fmt.Sprintf(", held %v", time.Duration(h.AgeMS)*time.Millisecond)
	}
	if h.Waiters != nil {
		line += fmt.Sprintf(", %d waiting", *h.Waiters)
	}
	if h.Payload != "" {
		line += fmt.Sprintf(": %q", h.Payload)
	}
	return line
}

func look(ctx context.Context, t *target, name string) (holder, error) {
	h, ok, err := t.locker.Inspect(ctx, name)
	if err != nil {
		return holder{}, err
	}
	return holder{Name: name, Held: ok, Owner: h.Owner, Token: h.Token, TTLMS: h.TTL.Milliseconds(), AgeMS: h.Age.Milliseconds(),
		Payload: h.Payload, HeldBackMS: h.HeldBack.Milliseconds(), At: time.Now().UTC().Format(time.RFC3339Nano)}, nil
}

// list prints the locks held under prefix, one line each.
func list(ctx context.Context, t *target, prefix string, limit int, out printer) error {
	if limit <= 0 {
		return fmt.Errorf("%w: --limit must be positive", errUsage)
	}
	held, err := t.locker.List(ctx, prefix, limit)
	if err != nil {
		return err
	}
	at := time.Now().UTC().Format(time.RFC3339Nano)
	if !out.json {
		return table(out.w, prefix, held)
	}
	for _, h := range held {
		hd := holder{Name: h.Name, Held: true, Owner: h.Owner, Token: h.Token, TTLMS: h.TTL.Milliseconds(), AgeMS: h.Age.Milliseconds(),
			Payload: h.Payload, At: at}
		if h.Waiters != dlock.UnknownWaiters {
			hd.Waiters = &h.Waiters
		}
		out.print(hd, "")
	}
	return nil
}

// table prints held as ls's aligned columns, a header first; a waiting
// count the backend does not keep is "-", an age it does not know "?".
func table(w io.Writer, prefix string, held []dlock.Held) error {
	if len(held) == 0 {
		_, err := fmt.Fprintf(w, "no lock is held under %q\n", prefix)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tOWNER\tTOKEN\tLEFT\tHELD FOR\tWAITING\tPAYLOAD")
	for _, h := range held {
		waiting, age, payload, left := "-", "?", "", "session" // a session's lock has no expiry of its own
		if h.TTL > 0 {
			left = h.TTL.Round(time.Millisecond).String()
		}
		if h.Waiters != dlock.UnknownWaiters {
			waiting = strconv.Itoa(h.Waiters)
		}
		if h.Age > 0 {
			age = h.Age.Round(time.Millisecond).String()
		}
		if h.Payload != "" {
			payload = strconv.Quote(h.Payload)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", h.Name, h.Owner, h.Token, left, age, waiting, payload)
	}
	return tw.Flush()
}

// stdin is where release reads its confirmation.
var stdin io.Reader = os.Stdin

// release takes name from its holder, once the user confirms.
func release(ctx context.Context, t *target, name string, yes bool, timeout time.Duration, out printer, stderr io.Writer) error {
	rctx, cancel := requestBound(ctx, timeout)
	h, err := look(rctx, t, name)
	cancel()
	if err != nil {
		return withCause(rctx, err)
	}
	if !h.Held {
		out.print(h, h.String())
		return nil
	}
	if !yes {
		fmt.Fprintf(stderr, "take %s from %s (token %d)? Its holder learns it only at its next renewal. [y/N] ", name, h.Owner, h.Token)
		var answer string
		if _, err := fmt.Fscanln(stdin, &answer); err != nil || answer != "y" && answer != "yes" {
			return fmt.Errorf("%w: not released", errUsage)
		}
	}
	rctx, cancel = requestBound(ctx, timeout)
	defer cancel()
	evicted, ok, err := t.locker.ForceRelease(rctx, name)
	if err != nil {
		return withCause(rctx, err)
	}
	if !ok {
		h = holder{Name: name, At: time.Now().UTC().Format(time.RFC3339Nano)}
		out.print(h, h.String())
		return nil
	}
	r := released{Name: name, Owner: evicted.Owner, Token: evicted.Token, At: time.Now().UTC().Format(time.RFC3339Nano)}
	r.Released = true
	out.print(r, fmt.Sprintf("%s %s taken from %s (token %d)", r.At, name, r.Owner, r.Token))
	return nil
}

// released is what release did.
type released struct {
	Name     string `json:"name"`
	Released bool   `json:"released"`
	Owner    string `json:"evicted_owner"`
	Token    uint64 `json:"evicted_token"`
	At       string `json:"at"`
}

func inspect(ctx context.Context, t *target, name string, out printer) error {
	h, err := look(ctx, t, name)
	if err != nil {
		return err
	}
	out.print(h, h.String())
	return nil
}

// watch prints name's state, then a line each time its holder changes,
// until ctx ends (SIGINT), or a look gets no answer within timeout.
func watch(ctx context.Context, t *target, name string, interval, timeout time.Duration, out printer) error {
	if interval <= 0 {
		return fmt.Errorf("%w: --interval must be positive", errUsage)
	}
	var last holder
	first := true
	for {
		rctx, cancel := requestBound(ctx, timeout)
		h, err := look(rctx, t, name)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			return withCause(rctx, err)
		case first || h.Held != last.Held || h.Owner != last.Owner || h.Token != last.Token:
			out.print(h, h.String())
			first, last = false, h
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// flagSet is the flags of inv.sub, parsed into inv; the flag package
// prints its complaints to w.
func flagSet(inv *invocation, w io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("dlock "+inv.sub, flag.ContinueOnError)
	fs.SetOutput(w)
	fs.StringVar(&inv.s.url, "url", os.Getenv("DLOCK_URL"), "the server: postgres://, mysql://, redis://, zk:// or etcd://")
	fs.StringVar(&inv.s.kind, "lock", "tablelock", "the lock of a SQL URL: tablelock or advisory")
	fs.BoolVar(&inv.json, "json", false, "print JSON lines")
	fs.DurationVar(&inv.s.ttl, "ttl", dlock.DefaultTTL, "the lease's TTL (run)")
	fs.DurationVar(&inv.interval, "interval", time.Second, "how often watch looks")
	fs.DurationVar(&inv.timeout, "timeout", 0, "how long run waits for the lock (0: as long as it takes); how long ls, inspect, migrate and prune, and each request of watch and release, wait for the server (0: 10s)")
	fs.DurationVar(&inv.grace, "grace", 10*time.Second, "how long run waits between SIGTERM and SIGKILL")
	fs.DurationVar(&inv.idle, "idle", 24*time.Hour, "how long a free row stays before prune deletes it")
	fs.IntVar(&inv.limit, "limit", dlock.DefaultListLimit, "how many locks ls lists at most")
	fs.BoolVar(&inv.yes, "yes", false, "release without asking")
	fs.StringVar(&inv.payload, "payload", "", "who holds the lock and why, kept with it where the backend can (run)")
	return fs
}
