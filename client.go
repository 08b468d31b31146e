package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"time"

	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errjoin"
)

// Client is the Locker every backend builds on: it turns a Backend's single
// attempts into waiting, re-entry, renewal and loss signalling. Backends
// embed it; users get it through a backend's New.
//
// One Client is safe for any number of goroutines, and they exclude each
// other: a Lock of a name another goroutine holds through the same Client
// waits in the process (only one goroutine per name and Client talks to
// the server at a time) until that hold ends, in the order the Locks
// came: the goroutine that released cannot take the name back ahead of
// those waiting. Where the backend can (driver.Transferer), the hold that
// ends passes straight to the first of them, with a new token, in the
// request that ends it, up to Config.HandOffs times in a row (see
// WithHandOffs). Re-entry is bound to the call
// chain, not to the Client: a Lock whose ctx carries a lease of the same
// name from this Client (see ContextWithLease; Do does it for fn) re-enters
// that hold at once.
type Client struct {
	backend driver.Backend
	cfg     Config
	family  *family
	caller  *caller
	tel     *telemetry

	// shared is set for a driver.Sharer backend: each call chain's hold
	// is its own, keyed by name and owner, and nobody queues in the
	// process.
	shared bool

	// mu guards the map of names and the Client's lifecycle; each name's
	// state has a lock of its own (see nameState).
	mu       sync.Mutex
	names    map[string]*entry
	closed   bool
	closing  context.Context // cancelled by Close
	closeAll context.CancelFunc
	wg       sync.WaitGroup // calls, watchdogs and releases, which Close awaits
	// lingering counts the releases of session-bound holds retried in
	// the background (see retry), which Close awaits for a bound and
	// then leaves running while their sessions live; idle is closed when
	// it drops to 0.
	lingering int
	idle      chan struct{}
}

// entry is a name's state in Client.names, with the calls using it.
type entry struct {
	st    *nameState
	users int
}

// family ties Clients whose holds of one name belong to one owner when a
// call chain carries them (a read-write lock's read and write sides): a
// chain holding the write side asks for the read side as the same owner.
type family struct{}

var (
	_ Locker    = (*Client)(nil)
	_ Inspector = (*Client)(nil)
)

// NewClient returns a Client over b with the given options. It fails, with
// no I/O, on a nil backend or an invalid option.
func NewClient(b driver.Backend, opts ...Option) (*Client, error) {
	if b == nil {
		return nil, errors.New("dlock: nil Backend")
	}
	cfg, err := NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if err := settingsFor(b, cfg); err != nil {
		return nil, err
	}
	if limit := maxTTL(b); cfg.TTL > limit {
		return nil, fmt.Errorf("dlock: TTL %v is longer than %v, the longest the backend's server keeps a lease (its package's MaxTTL)", cfg.TTL, limit)
	}
	return newClient(b, cfg, &family{}), nil
}

// MaxTTL is the longest TTL (WithTTL) c's backend keeps a lease for: the
// bound its package documents (driver.TTLBounded), or else the longest
// time.Duration. Code that makes Lockers of any backend can check a TTL
// against it.
func (c *Client) MaxTTL() time.Duration { return maxTTL(c.backend) }

func maxTTL(b driver.Backend) time.Duration {
	if t, ok := b.(driver.TTLBounded); ok {
		return t.MaxTTL()
	}
	return math.MaxInt64
}

// NewSibling returns a Client over b with c's configuration, whose holds
// are the same owner as c's holds of the same name within one call chain:
// a chain that holds name through c asks b for name as that holder. A
// read-write lock's sides are siblings, so a writer may take the read lock
// (downgrade). It does no I/O.
func (c *Client) NewSibling(b driver.Backend) (*Client, error) {
	if b == nil {
		return nil, errors.New("dlock: nil Backend")
	}
	return newClient(b, c.cfg, c.family), nil
}

// settingsFor checks that every setting of cfg (WithSetting) comes from
// b's own package.
func settingsFor(b driver.Backend, cfg Config) error {
	pkg := packageOf(reflect.TypeOf(b))
	for key := range cfg.settings {
		from := packageOf(reflect.TypeOf(key))
		if from == "" || from == "<nil>" {
			return fmt.Errorf("dlock: WithSetting's key %#v is not of a type of the backend's package", key)
		}
		if from != pkg {
			return fmt.Errorf("dlock: an option of package %s was given to a Locker of package %s", from, pkg)
		}
	}
	return nil
}

func packageOf(t reflect.Type) string {
	if t == nil {
		return "<nil>"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath()
}

func newClient(b driver.Backend, cfg Config, f *family) *Client {
	c := &Client{backend: b, cfg: cfg, family: f, names: make(map[string]*entry)}
	if s, ok := b.(driver.Sharer); ok && s.SharesHolds() {
		c.shared = true
	}
	c.closing, c.closeAll = context.WithCancel(context.Background())
	c.caller = &caller{backend: b, workers: newWorkers(c.closing.Done()), track: c.started}
	c.tel = newTelemetry(cfg, b)
	return c
}

// Identity implements Identifier: the backend's Identity when it has one
// (a server address, a root path), else its type.
func (c *Client) Identity() string {
	if id, ok := c.backend.(Identifier); ok {
		return id.Identity()
	}
	return fmt.Sprintf("%T", c.backend)
}

// Owner returns this Client's owner label. Each hold is stored on the
// server under the label and a random hold id (see Lease.Owner).
func (c *Client) Owner() string { return c.cfg.Owner }

// Config returns the validated configuration.
func (c *Client) Config() Config { return c.cfg }

// Lock implements Locker. ctx governs the wait, in the process and on the
// server; a ctx that has already ended fails before any I/O.
func (c *Client) Lock(ctx context.Context, name string) (Lease, error) {
	return c.measuredLock(ctx, c.plainCall(name, true))
}

// measuredLock is lock, measured (see telemetry).
func (c *Client) measuredLock(ctx context.Context, call *lockCall) (Lease, error) {
	if ctx == nil {
		return nil, errors.New("dlock: nil Context")
	}
	ctx, m := c.tel.startCall(ctx, call.name, call.wait)
	l, err := c.lock(ctx, call)
	err = errjoin.OneLine(err)
	m.end(ctx, l, err)
	return l, err
}

// TryLock implements Locker. It fails with ErrNotAcquired, without I/O,
// when another call chain holds name through this Client.
func (c *Client) TryLock(ctx context.Context, name string) (Lease, error) {
	return c.measuredLock(ctx, c.plainCall(name, false))
}

// List implements Lister when the backend does; otherwise it returns
// errors.ErrUnsupported. limit 0 is DefaultListLimit. ctx governs the
// requests.
func (c *Client) List(ctx context.Context, prefix string, limit int) ([]Held, error) {
	if limit < 0 {
		return nil, fmt.Errorf("dlock: list: negative limit %d", limit)
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	l, ok := c.backend.(Lister)
	if !ok {
		return nil, fmt.Errorf("dlock: list %q: %w", prefix, errors.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dlock: list %q: %w", prefix, err)
	}
	held, err := read(c.caller, ctx, func(ctx context.Context) ([]Held, error) { return l.List(ctx, prefix, limit) })
	return held, errjoin.OneLine(err)
}

// ForceRelease implements ForceReleaser when the backend does; otherwise
// it returns errors.ErrUnsupported. Read ForceReleaser before using it.
// The eviction is logged (Config.Logger, at warning level).
func (c *Client) ForceRelease(ctx context.Context, name string) (Holder, bool, error) {
	if err := c.validName(name); err != nil {
		return Holder{}, false, err
	}
	fr, ok := c.backend.(ForceReleaser)
	if !ok {
		return Holder{}, false, fmt.Errorf("dlock: force release %q: %w", name, errors.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return Holder{}, false, fmt.Errorf("dlock: force release %q: %w", name, err)
	}
	type evicted struct {
		h  Holder
		ok bool
	}
	logged := func(e evicted, err error) {
		if err == nil && e.ok {
			c.cfg.Logger.Warn("dlock: lock taken from its holder (ForceRelease)", "name", name, "owner", e.h.Owner, "token", e.h.Token)
		}
	}
	e, err, _ := within(c.caller, ctx, c.caller.inline(ctx), 0, func(ctx context.Context) (evicted, error) {
		h, ok, err := fr.ForceRelease(ctx, name)
		return evicted{h, ok}, err
	}, logged)
	logged(e, err)
	return e.h, e.ok, errjoin.OneLine(err)
}

// Inspect implements Inspector when the backend does; otherwise it returns
// errors.ErrUnsupported. ctx governs the request.
func (c *Client) Inspect(ctx context.Context, name string) (Holder, bool, error) {
	if err := c.validName(name); err != nil {
		return Holder{}, false, err
	}
	in, ok := c.backend.(Inspector)
	if !ok {
		return Holder{}, false, fmt.Errorf("dlock: inspect: %w", errors.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return Holder{}, false, fmt.Errorf("dlock: inspect %q: %w", name, err)
	}
	type seen struct {
		h  Holder
		ok bool
	}
	s, err := read(c.caller, ctx, func(ctx context.Context) (seen, error) {
		h, ok, err := in.Inspect(ctx, name)
		return seen{h, ok}, err
	})
	return s.h, s.ok, errjoin.OneLine(err)
}

// notAcquired is the error of a Lock whose ctx ended while it waited for
// name, for the reason why gives: one line, each cause once. What the
// backend's call returned as the wait was cut short (its own ctx error, a
// connection ended to stop a wait on the server) follows from ctx's end
// and is not repeated.
func notAcquired(ctx context.Context, name, why string) error {
	return errjoin.Join(fmt.Errorf("%w: %q %s", ErrNotAcquired, name, why), ctx.Err())
}

// Why a Lock whose ctx ended did not get the name.
const (
	byNobody    = "was not tried: ctx had ended"
	byOwner     = "was not granted before ctx ended: another owner held it"
	noAnswer    = "was not granted before ctx ended: the server had not answered (what the attempt may hold is given back)"
	queuedEnd   = "was not granted before ctx ended: it waited in the server's queue (behind another owner, or for a server slow to answer; its place is given back)"
	grantedLate = "was not granted before ctx ended: the server's grant came after it, and was given back"
	unconfirmed = "was not granted before ctx ended: each grant ended on the server before a renewal could confirm it (round trips too slow for the TTL)"
	busy        = "was free, but another attempt on it was being decided on the server at that moment"
	busyEnd     = "was not granted before ctx ended: another attempt on it was being decided on the server each time"
	byThisChain = "is held by another call chain of this process (a chain re-enters a hold only through ctx: see ContextWithLease)"
)

// validName checks name for every backend, then for this one.
func (c *Client) validName(name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if nc, ok := c.backend.(driver.NameChecker); ok {
		return nc.CheckName(name)
	}
	return nil
}

func (c *Client) lock(ctx context.Context, call *lockCall) (Lease, error) {
	name := call.name
	if err := c.validName(name); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, notAcquired(ctx, name, byNobody)
	}
	ctx, cancel := call.bounded(ctx)
	defer cancel()
	mine, owner := c.chainHold(ctx, name)
	st, err := c.enter(name)
	if err != nil {
		return nil, err
	}
	defer c.exit(st)
	if c.shared {
		step := st.sharedStep(call, mine, owner)
		if step.lease != nil || step.err != nil {
			return leaseOrErr(step.lease, step.err)
		}
		return c.acquire(ctx, step.hold, call.wait)
	}
	var t *turn // this call's place in the name's queue
	for {
		step := st.step(call, &t, mine, owner)
		switch {
		case step.leave:
			c.leaveQueue(st, t)
			return nil, step.err
		case step.err != nil:
			return nil, step.err
		case step.lease != nil:
			return step.lease, nil
		case step.hold != nil:
			return c.acquire(ctx, step.hold, call.wait)
		}
		select {
		case <-step.wait:
		case <-ctx.Done():
			c.leaveQueue(st, t)
			return nil, notAcquired(ctx, name, byThisChain)
		case <-c.closing.Done():
			c.leaveQueue(st, t)
			return nil, ErrClosed
		}
	}
}

// leaseOrErr returns l as a Lease, or err: a nil *lease is no Lease.
func leaseOrErr(l *lease, err error) (Lease, error) {
	if l == nil {
		return nil, err
	}
	return l, nil
}

// leaveQueue takes t out of st's queue; a lease handed on to it and not
// taken is given back, which hands the lock on again.
func (c *Client) leaveQueue(st *nameState, t *turn) {
	if l := st.leave(t); l != nil {
		c.background(func() {
			if err := l.Unlock(context.Background()); err != nil {
				c.cfg.Logger.Warn("dlock: giving back a lock handed to a Lock that had left", "name", st.name, "err", err)
			}
		})
	}
}

// enter returns name's state, made if need be, for a call that uses it
// until exit; it fails with ErrClosed after Close.
func (c *Client) enter(name string) (*nameState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	e := c.names[name]
	if e == nil {
		e = &entry{st: &nameState{c: c, name: name}}
		c.names[name] = e
	}
	e.users++
	return e.st, nil
}

// exit ends a call's use of st.
func (c *Client) exit(st *nameState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.names[st.name]; e != nil && e.st == st {
		e.users--
	}
	c.forgetLocked(st)
}

// forget drops st from the map once no call uses it and it is idle.
func (c *Client) forget(st *nameState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(st)
}

func (c *Client) forgetLocked(st *nameState) {
	if e := c.names[st.name]; e != nil && e.st == st && e.users == 0 && st.idle() {
		delete(c.names, st.name)
	}
}

// state returns name's state, or nil when there is none (for tests).
func (c *Client) state(name string) *nameState {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.names[name]; e != nil {
		return e.st
	}
	return nil
}

// newOwner returns a fresh server-side owner id: the owner label, '#' and
// 64 random bits. Knowing it (from Inspect, the lock table or Redis) does
// not let another Client enter the hold: every Client draws its own.
func (c *Client) newOwner() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents it)
	return c.cfg.Owner + "#" + hex.EncodeToString(b[:])
}

// Close ends every lease of this Client (their Err is ErrClosed), stops
// every Lock still waiting (they return ErrClosed), releases the locks on
// the server and makes later calls return ErrClosed. The releases run even
// when ctx has already ended, each bounded by DefaultReleaseTimeout, so a
// shutdown context cannot leave locks held for a TTL; Close returns when
// they are done or that bound has passed. A release that fails is retried
// until the bound; one that must go on while its session lives (a lock
// that ends with its session) is awaited for that bound too, and then
// goes on in the background. Close does not close the connections or clients the
// backend was given: they belong to the caller. Close twice is a no-op.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.closeAll()
	states := make([]*nameState, 0, len(c.names))
	for _, e := range c.names {
		states = append(states, e.st)
	}
	c.mu.Unlock()
	var ended []*hold
	for _, st := range states {
		ended = append(ended, st.close()...)
	}
	errs := make([]error, len(ended))
	var wg sync.WaitGroup
	until := time.Now().Add(DefaultReleaseTimeout)
	for i, h := range ended {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.release(h, releaseHow{until: until})
		}()
	}
	wg.Wait()
	c.wg.Wait()
	if !c.awaitLingering(DefaultReleaseTimeout) {
		c.cfg.Logger.Warn("dlock: Close: releases of session-bound locks still retrying; they go on while their sessions live")
	}
	return errjoin.Join(errs...)
}

// background runs f on a goroutine that Close waits for, if it starts
// before Close.
func (c *Client) background(f func()) {
	done := c.started()
	c.caller.workers.run(func() {
		defer done()
		f()
	})
}

// started counts a task that Close waits for, unless c is closed already,
// and returns what ends it.
func (c *Client) started() (done func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return func() {}
	}
	c.wg.Add(1)
	return c.wg.Done
}

// lingers counts a session-bound release that Close awaits only for a
// bound, and returns what ends it.
func (c *Client) lingers() (done func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lingering == 0 {
		c.idle = make(chan struct{})
	}
	c.lingering++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.lingering--; c.lingering == 0 {
			close(c.idle)
		}
	}
}

// awaitLingering waits at most d for the lingering releases to end and
// reports whether they did.
func (c *Client) awaitLingering(d time.Duration) bool {
	c.mu.Lock()
	idle := c.idle
	n := c.lingering
	c.mu.Unlock()
	if n == 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}
