package dlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
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

	// shared is set for a driver.Sharer backend: each call chain's hold
	// is its own, keyed by name and owner, and nobody queues in the
	// process.
	shared bool

	mu       sync.Mutex
	holds    map[string]*hold // by holdKey
	queues   map[string]*localQueue
	closed   bool
	closing  context.Context // cancelled by Close
	closeAll context.CancelFunc
	wg       sync.WaitGroup // watchdogs and background releases
	// lingering counts the releases of session-bound holds retried in
	// the background (see releaseLater), which Close awaits for a bound
	// and then leaves running while their sessions live; idle is closed
	// when it drops to 0.
	lingering int
	idle      chan struct{}
	workers   *workers // run backend calls (see call and withinCtx)
	tel       *telemetry
}

// localQueue is the call chains of one Client waiting for a name another
// chain holds, in arrival order. When the hold ends, the first one is
// handed the turn: nobody else may take the name until it does, or passes
// the turn on as it leaves. Guarded by Client.mu.
type localQueue struct {
	waiting []*turn
	handed  *turn // the turn handed out and not yet taken
}

// turn is one call chain's place in a localQueue. Guarded by Client.mu.
type turn struct {
	ready chan struct{} // closed when the turn comes
	// owner is the server-side owner id the chain must hold the name as
	// (a sibling's, see chainHold), or "" for a fresh one.
	owner string
	// lease comes with the turn when the last hold was handed straight
	// on to this chain (handOff); nil when the chain takes the name on
	// the server itself.
	lease *lease
	// call is the chain's Lock: a hold handed on to it is made with its
	// settings.
	call *lockCall
}

// family ties Clients whose holds of one name belong to one owner when a
// call chain carries them (a read-write lock's read and write sides): a
// chain holding the write side asks for the read side as the same owner.
type family struct{}

var (
	_ Locker    = (*Client)(nil)
	_ Inspector = (*Client)(nil)
)

type holdState int

const (
	acquiring holdState = iota // one goroutine is taking the lock on the server
	held                       // leases exist; the watchdog runs
	ending                     // the server-side release is in flight
)

// hold is this Client's hold of one name on the server; its leases are the
// re-entries of one call chain. Fields other than Hold are guarded by
// Client.mu.
type hold struct {
	driver.Hold
	key      string // in Client.holds (see holdKey)
	state    holdState
	gone     chan struct{} // closed when the hold leaves Client.holds
	leases   map[*lease]struct{}
	deadline time.Time // monotonic: the lease is lost unless renewed by then
	ctx      context.Context
	cancel   context.CancelFunc // stops the watchdog
	watched  chan struct{}      // closed when the watchdog has exited
	// handOffs is how many hand-offs in a row led to this hold: 0 for a
	// hold taken on the server (see handOff).
	handOffs int
	// measured is the hold's telemetry from its grant until its end.
	measured holdSpan
	// payload is stored with the hold on the server (WithPayload).
	payload string
}

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
	c := &Client{backend: b, cfg: cfg, family: f, holds: make(map[string]*hold), queues: make(map[string]*localQueue)}
	if s, ok := b.(driver.Sharer); ok && s.SharesHolds() {
		c.shared = true
	}
	c.closing, c.closeAll = context.WithCancel(context.Background())
	c.workers = newWorkers(c.closing.Done())
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
	held, _, err := withinCtx(ctx, c.workers, func(ctx context.Context) ([]Held, struct{}, error) {
		held, err := l.List(ctx, prefix, limit)
		return held, struct{}{}, err
	})
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
	h, ok, err := withinCtx(ctx, c.workers, func(ctx context.Context) (Holder, bool, error) { return fr.ForceRelease(ctx, name) })
	if err == nil && ok {
		c.cfg.Logger.Warn("dlock: lock taken from its holder (ForceRelease)", "name", name, "owner", h.Owner, "token", h.Token)
	}
	return h, ok, errjoin.OneLine(err)
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
	h, ok, err := withinCtx(ctx, c.workers, func(ctx context.Context) (Holder, bool, error) { return in.Inspect(ctx, name) })
	return h, ok, errjoin.OneLine(err)
}

// notAcquired is the error of a Lock whose ctx ended while it waited for
// name, held by whom says: one line, each cause once. What the backend's
// call returned as the wait was cut short (its own ctx error, a
// connection ended to stop a wait on the server) follows from ctx's end
// and is not repeated.
func notAcquired(ctx context.Context, name, whom string) error {
	return errjoin.Join(fmt.Errorf("%w: %q %s", ErrNotAcquired, name, whom), ctx.Err())
}

// Who a Lock whose ctx ended was waiting for.
const (
	byNobody    = "was not tried: ctx had ended"
	byOwner     = "was not granted before ctx ended: another owner held it, or the server or pool did not answer"
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
	if ctx == nil {
		return nil, errors.New("dlock: nil Context")
	}
	if ctx.Err() != nil {
		return nil, notAcquired(ctx, name, byNobody)
	}
	ctx, cancel := call.bounded(ctx)
	defer cancel()
	mine, owner := c.chainHold(ctx, name)
	if c.shared {
		return c.lockShared(ctx, call, mine, owner)
	}
	var t *turn // this call's place in the name's queue
	for {
		step := c.nextStep(call, &t, mine, owner)
		switch {
		case step.leave:
			c.leaveQueue(name, t)
			return nil, step.err
		case step.err != nil:
			return nil, step.err
		case step.lease != nil:
			return step.lease, nil
		case step.hold != nil:
			return c.acquire(ctx, step.hold, call.wait)
		}
		if err := c.await(ctx, name, step.wait); err != nil {
			c.leaveQueue(name, t)
			return nil, err
		}
	}
}

// localStep is what a Lock does next in the in-process queue, decided
// under c.mu: it is done (lease, or err, after leaving the queue when
// leave), takes hold on the server, or waits for wait and decides again.
type localStep struct {
	lease *lease
	err   error
	leave bool
	hold  *hold
	wait  <-chan struct{}
}

// nextStep decides the next step of call, as chain (mine, owner) whose
// place in the name's queue is *t (nil: none yet; nextStep joins the
// queue when the Lock must wait).
func (c *Client) nextStep(call *lockCall, t **turn, mine *hold, owner string) localStep {
	name := call.name
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return localStep{err: ErrClosed, leave: true}
	}
	h, q := c.holds[name], c.queues[name]
	if *t != nil && q != nil && q.handed == *t {
		return c.turnCame(call, *t, q, h, owner)
	}
	switch {
	case h == nil && (q == nil || q.handed == nil && len(q.waiting) == 0):
		return localStep{hold: c.freshHold(call, q, owner)}
	case h != nil && h == mine && h.state == held:
		return localStep{lease: h.newLease(c)}
	case !call.wait:
		return localStep{err: fmt.Errorf("%w: %q is held, or waited for, by another call chain of this process", ErrNotAcquired, name)}
	}
	if *t == nil {
		*t = c.join(call, q, owner)
	}
	return localStep{wait: (*t).ready}
}

// turnCame is the step of call, whose turn, t, has come. c.mu must be
// held.
func (c *Client) turnCame(call *lockCall, t *turn, q *localQueue, h *hold, owner string) localStep {
	name := call.name
	switch {
	case t.lease != nil && t.lease.err == nil:
		// The last hold was handed straight on to this chain.
		l := t.lease
		t.lease, q.handed = nil, nil
		c.dropIdle(name, q)
		return localStep{lease: l}
	case h != nil:
		// The turn came with a hold that ended before this chain took
		// it: keep the turn until the hold is gone.
		t.lease = nil
		return localStep{wait: h.gone}
	}
	return localStep{hold: c.freshHold(call, q, owner)}
}

// freshHold makes the hold a chain takes on the server for call, ending
// its turn in q (nil: none). c.mu must be held.
func (c *Client) freshHold(call *lockCall, q *localQueue, owner string) *hold {
	if q != nil {
		q.handed = nil
		c.dropIdle(call.name, q)
	}
	if owner == "" {
		owner = c.newOwner()
	}
	return c.newHold(call, owner)
}

// join queues a chain (owner) for call's name. c.mu must be held.
func (c *Client) join(call *lockCall, q *localQueue, owner string) *turn {
	if q == nil {
		q = &localQueue{}
		c.queues[call.name] = q
	}
	t := &turn{ready: make(chan struct{}), owner: owner, call: call}
	q.waiting = append(q.waiting, t)
	return t
}

// lockShared is lock for a backend whose holds of one name coexist: the
// chain re-enters its own hold, or takes one of its own and waits for it
// on the server.
func (c *Client) lockShared(ctx context.Context, call *lockCall, mine *hold, owner string) (Lease, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if mine != nil && c.holds[mine.key] == mine && mine.state == held {
		l := mine.newLease(c)
		c.mu.Unlock()
		return l, nil
	}
	if owner == "" {
		owner = c.newOwner()
	}
	h := c.newHold(call, owner)
	c.mu.Unlock()
	return c.acquire(ctx, h, call.wait)
}

// newHold adds an acquiring hold for call as owner to c.holds. c.mu must
// be held.
func (c *Client) newHold(call *lockCall, owner string) *hold {
	h := &hold{
		Hold:    driver.Hold{Name: call.name, Owner: owner, TTL: call.ttl},
		payload: call.payload,
		key:     c.holdKey(call.name, owner),
		state:   acquiring,
		gone:    make(chan struct{}),
	}
	c.holds[h.key] = h
	return h
}

// holdKey is where c.holds keeps a hold of name as owner: by name alone,
// since one hold per name is the rule, or by name and owner when holds
// are shared.
func (c *Client) holdKey(name, owner string) string {
	if c.shared {
		return name + "\x00" + owner
	}
	return name
}

// await waits for ready, and fails as a Lock does when ctx ends or c is
// closed first.
func (c *Client) await(ctx context.Context, name string, ready <-chan struct{}) error {
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		return notAcquired(ctx, name, byThisChain)
	case <-c.closing.Done():
		return ErrClosed
	}
}

// dropIdle forgets q, name's queue, once nobody waits in it and no turn
// is out. c.mu must be held.
func (c *Client) dropIdle(name string, q *localQueue) {
	if q.handed == nil && len(q.waiting) == 0 {
		delete(c.queues, name)
	}
}

// leaveQueue takes t (nil: none) out of name's queue. A turn handed to it
// and not taken passes to the next in line; a lease handed with it is
// given up, which hands the lock on again.
func (c *Client) leaveQueue(name string, t *turn) {
	if t == nil {
		return
	}
	c.mu.Lock()
	q := c.queues[name]
	if q == nil {
		c.mu.Unlock()
		return
	}
	var handedOn *lease
	if q.handed == t {
		q.handed = nil
		if l := t.lease; l != nil && l.err == nil {
			handedOn = l
		} else if c.holds[name] == nil {
			c.handTurn(q)
		}
		t.lease = nil
	} else if i := slices.Index(q.waiting, t); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
	}
	c.dropIdle(name, q)
	c.mu.Unlock()
	if handedOn != nil {
		c.giveBack(handedOn)
	}
}

// handTurn gives the name of q to the first chain in q, if any. c.mu
// must be held.
func (c *Client) handTurn(q *localQueue) {
	if len(q.waiting) == 0 {
		return
	}
	q.handed = q.waiting[0]
	q.waiting = slices.Delete(q.waiting, 0, 1)
	close(q.handed.ready)
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
	var (
		ended    []*hold
		measured []holdSpan
	)
	for _, h := range c.holds {
		if h.state != held {
			continue
		}
		for l := range h.leases {
			l.end(ErrClosed)
		}
		h.state = ending
		measured = append(measured, measuredEnd(h))
		h.cancel()
		ended = append(ended, h)
	}
	c.mu.Unlock()
	for i, h := range ended {
		c.tel.holdEnds(h.Name, &measured[i], "closed")
	}

	errs := make([]error, len(ended))
	var wg sync.WaitGroup
	for i, h := range ended {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-h.watched
			errs[i] = c.releaseUntil(h, time.Now().Add(DefaultReleaseTimeout))
		}()
	}
	wg.Wait()
	c.wg.Wait()
	if !c.awaitLingering(DefaultReleaseTimeout) {
		c.cfg.Logger.Warn("dlock: Close: releases of session-bound locks still retrying; they go on while their sessions live")
	}
	return errjoin.Join(errs...)
}

// settle forgets h once it is released (or given up).
func (c *Client) settle(h *hold) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds[h.key] == h {
		delete(c.holds, h.key)
		if q := c.queues[h.Name]; q != nil && q.handed == nil {
			c.handTurn(q)
		}
	}
	select {
	case <-h.gone:
	default:
		close(h.gone)
	}
}
