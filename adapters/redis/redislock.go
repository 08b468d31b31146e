package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// Locker is a Redis lock client, safe for concurrent use by every
// goroutine of a process.
type Locker struct {
	*dlock.Client
	notifier *notifierRef
	waiterID string // New's (see backend.id)
}

var (
	_ dlock.Locker    = (*Locker)(nil)
	_ dlock.Inspector = (*Locker)(nil)
)

// New returns a Locker on client: a single server (*redis.Client), a
// Sentinel failover client or a Cluster (*redis.ClusterClient, which uses
// sharded pub/sub). New does no I/O; client stays the caller's. Each hold
// is its own owner on the server (the Locker's label, '#', a random id).
//
// WithReplicas(n) makes every grant and renewal wait for n replicas
// (failover-safe mode, see the package doc).
func New(client redis.UniversalClient, opts ...dlock.Option) (*Locker, error) {
	if err := checkClient(client); err != nil {
		return nil, err
	}
	n := notifierFor(client)
	b := &backend{client: client, notifier: n, id: randomID()}
	c, err := dlock.NewClient(handing{b}, opts...)
	if err != nil {
		return nil, failed(err, n)
	}
	if err := only(c.Config(), "New", replicasKey{}, restartWindowKey{}); err != nil {
		return nil, failed(err, n)
	}
	window, err := restartWindowOf(c.Config())
	if err != nil {
		return nil, failed(err, n)
	}
	b.restarts, b.ttl = newRestarts(client, window), c.Config().TTL
	if b.replicas, err = replicasOf(c.Config(), client); err != nil {
		return nil, failed(err, n)
	}
	b.wait = waitTimeout(c.Config().TTL)
	// A live waiter refreshes its entry at every attempt, at least once a
	// PushFallback.
	b.entryLife = 2*c.Config().PushFallback + time.Second
	n.addWaiterID(b.id)
	return &Locker{Client: c, notifier: n, waiterID: b.id}, nil
}

// Close ends every lease of l, releases their locks (see
// dlock.Client.Close), and gives back its share of the client's pub/sub
// connection, which the last user closes.
func (l *Locker) Close(ctx context.Context) error {
	err := l.Client.Close(ctx)
	if l.waiterID != "" {
		l.notifier.removeWaiterID(l.waiterID)
	}
	return errjoin.Join(err, l.notifier.release())
}

// backend implements driver.Backend on one Redis deployment. A hold's
// Handle is its hold id, naming the hold in the lock's hash: the request's
// owner id, unique to the hold, so a hold whose acquire reply was lost can
// be released by its owner id alone.
type backend struct {
	client   redis.UniversalClient
	notifier *notifierRef
	// replicas is how many replicas must acknowledge each grant and
	// renewal (WithReplicas), within wait; 0: none.
	replicas int
	wait     time.Duration
	// restarts is how long a restarted server holds grants back; ttl is
	// the Locker's, the window without WithRestartWindow.
	restarts *restarts
	ttl      time.Duration

	// id is New's Locker among the lock's waiters on the server (see
	// scripts/lock_waiters.lua): a release wakes one waiting Locker by
	// it. Goroutines of one Locker queue in the process, so it waits on
	// the server once per name. entryLife is how long its entry lasts
	// unrefreshed.
	id        string
	entryLife time.Duration
	// waiting holds the owners whose attempts may have left an entry
	// among the waiters: the attempt that takes the lock, or Leave,
	// takes it out.
	waiting sync.Map
}

var (
	_ driver.Backend       = (*backend)(nil)
	_ driver.LiveNotifier  = (*backend)(nil)
	_ driver.DeadlineBound = (*backend)(nil)
	_ driver.Leaver        = (*backend)(nil)
	_ dlock.Inspector      = (*backend)(nil)
)

// BoundsCalls reports whether the client keeps each command's ctx
// deadline: a *redis.Client (one server, or Sentinel's failover client)
// with ContextTimeoutEnabled, which sets its reads' and writes' deadlines
// from ctx. Then dlock runs attempts and releases on the caller's
// goroutine. Not with WithReplicas, whose grants wait for replicas within
// a bound of their own; not for cluster and ring clients, whose
// redirections and shard look-ups this package does not vouch for.
func (b *backend) BoundsCalls() bool {
	c, ok := b.client.(*redis.Client)
	return ok && b.replicas == 0 && c.Options().ContextTimeoutEnabled
}

// holdOf is h's hold id: its Handle, or for the release of an acquire
// whose outcome is unknown (nil Handle), the owner id the acquire used.
func holdOf(h driver.Hold) string {
	if id, ok := h.Handle.(string); ok {
		return id
	}
	return h.Owner
}

// luaBool is b as the scripts' flags take it.
func luaBool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// ms is d as the scripts take TTLs: whole milliseconds, rounded up.
func ms(d time.Duration) int64 { return timeunit.Ceil(d, time.Millisecond) }

// acquireOn runs the acquire script on one server, for a waiter that any
// release wakes (it takes no place among the lock's waiters).
// window is the hold-back window argument (restarts.arg).
func acquireOn(ctx context.Context, c redis.Scripter, r driver.Request, hold string, incr bool, window string) (driver.Grant, error) {
	return acquireWith(ctx, c, r, hold, incr, waiterEntry{}, 0, 0, window)
}

// waiterEntry is a waiting attempt's place among the lock's waiters (see
// scripts/lock_waiters.lua): id "" takes none.
type waiterEntry struct {
	id   string
	life time.Duration
	had  bool // an earlier attempt may have left the entry
}

// acquireWith is acquireOn for the waiter e that, when replicas > 0, has
// the grant acknowledged by that many replicas within wait, and refuses
// it (releases it, returns ErrNotReplicated) when they do not.
func acquireWith(ctx context.Context, c redis.Scripter, r driver.Request, hold string, incr bool, e waiterEntry, replicas int, wait time.Duration, window string) (driver.Grant, error) {
	k := keysFor(r.Name)
	cmd, unconfirmed := runReplicated(ctx, c, replicas, wait, acquireScript, []string{k.lock(), k.fence(), k.lockWaiters()},
		r.Owner, ms(r.TTL), hold, luaBool(incr), luaBool(r.Wait), e.id, ms(e.life), luaBool(e.had), r.Payload, window)
	res, err := cmd.Int64Slice()
	if err != nil {
		return driver.Grant{}, err
	}
	if !isReply(res) {
		return driver.Grant{}, fmt.Errorf("redislock: acquire script returned %v", res)
	}
	if res[0] == 1 && unconfirmed != nil {
		// Granted on the master, not confirmed: refused. The Client
		// releases a failed attempt by its owner id; a replica that kept
		// the grant only makes the next holder wait for its expiry.
		return driver.Grant{}, unconfirmed
	}
	if res[0] == 1 {
		return driver.Grant{Acquired: true, Token: uint64(res[1]), Handle: hold}, nil
	}
	return notGranted(res, 0), nil
}

func (b *backend) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	e := waiterEntry{}
	if r.Wait && b.id != "" {
		_, had := b.waiting.Load(r.Owner)
		e = waiterEntry{id: b.id, life: b.entryLife, had: had}
	}
	var g driver.Grant
	err := b.onMaster(ctx, r.Name, func(c redis.Cmdable) (err error) {
		g, err = acquireWith(ctx, c, r, r.Owner, true, e, b.replicas, b.wait, b.restarts.arg(ctx))
		return err
	})
	switch {
	case e.id == "":
	case g.Acquired:
		if e.had {
			b.waiting.Delete(r.Owner)
		}
	case !e.had:
		// Missed, or its outcome is unknown: either may have left an
		// entry.
		b.waiting.Store(r.Owner, struct{}{})
	}
	return g, err
}

// Leave takes the Locker out of the lock's waiters when r's Lock gives up
// after a miss, and passes on a wake-up a release may have sent it.
func (b *backend) Leave(ctx context.Context, r driver.Request) error {
	if _, had := b.waiting.LoadAndDelete(r.Owner); !had {
		return nil
	}
	c, err := b.master(ctx, r.Name)
	if err != nil {
		return err
	}
	k := keysFor(r.Name)
	return leave(ctx, c, k.lock(), k.lockWaiters(), b.id, k.channel(), b.notifier.publishCommand(), true)
}

// keepFor is how long a release that wakes one of New's waiters keeps the
// lock free for it (see scripts/lock_waiters.lua): long enough for the
// wake-up and the waiter's attempt (0.6ms on average, rarely above 10ms,
// with 32 contending clients on two cores), short enough that a waiter
// that died costs little. A waiter that comes later competes as any
// attempt does.
const keepFor = 20 * time.Millisecond

// leave runs the leave script for waiter id on the lock whose keys are
// lock and waiters: it passes on a wake-up sent to id and, with out, takes
// id out of the waiters.
func leave(ctx context.Context, c redis.Scripter, lock, waiters, id, channel, publish string, out bool) error {
	return leaveScript.Run(ctx, c, []string{lock, waiters}, id, channel, publish, ms(keepFor), luaBool(out)).Err()
}

func refreshOn(ctx context.Context, c redis.Scripter, h driver.Hold) error {
	return refreshWith(ctx, c, h, 0, 0)
}

// refreshWith is refreshOn that, when replicas > 0, fails the renewal
// unless that many replicas acknowledge it within wait: the lease's
// deadline then stays where the replicas know it to be.
func refreshWith(ctx context.Context, c redis.Scripter, h driver.Hold, replicas int, wait time.Duration) error {
	k := keysFor(h.Name)
	cmd, unconfirmed := runReplicated(ctx, c, replicas, wait, refreshScript, []string{k.lock()}, ms(h.TTL), holdOf(h), strconv.FormatUint(h.Token, 10))
	ok, err := cmd.Int64()
	if err != nil {
		return err
	}
	if ok != 1 {
		return fmt.Errorf("%w: %q with token %d is gone from the server", dlock.ErrNotHeld, h.Name, h.Token)
	}
	return unconfirmed
}

func (b *backend) Refresh(ctx context.Context, h driver.Hold) error {
	return b.onMaster(ctx, h.Name, func(c redis.Cmdable) error { return refreshWith(ctx, c, h, b.replicas, b.wait) })
}

// releaseOn releases h on one server; a zero h.Token matches any token.
func releaseOn(ctx context.Context, c redis.Scripter, h driver.Hold, publish string) error {
	k := keysFor(h.Name)
	token := ""
	if h.Token != 0 {
		token = strconv.FormatUint(h.Token, 10)
	}
	left, err := releaseScript.Run(ctx, c, []string{k.lock(), k.lockWaiters()}, h.Owner, holdOf(h), token, k.channel(), publish, ms(keepFor)).Int64()
	if err != nil {
		return err
	}
	if left < 0 {
		return fmt.Errorf("%w: %q with token %d was not held", dlock.ErrNotHeld, h.Name, h.Token)
	}
	return nil
}

func (b *backend) Release(ctx context.Context, h driver.Hold) error {
	return releaseOn(ctx, b.client, h, b.notifier.publishCommand())
}

// handing is New's backend: backend, and a hold can pass straight to the
// next call chain of the same Locker (driver.Transferer, see
// dlock.WithHandOffs). NewFair's backend hands on too, while no other
// waiter is queued on the server (see fairBackend.Transfer).
type handing struct{ *backend }

var _ driver.Transferer = handing{}

// Transfer ends h and grants its name to r.Owner with a new token, in one
// script: a hand-off costs one request instead of a release, a publish
// and an acquire. In failover-safe mode the hand-off is acknowledged by
// the replicas as a grant is; one that is not is refused, and the Client
// gives back whatever either owner may hold.
func (b handing) Transfer(ctx context.Context, h driver.Hold, r driver.Request) (driver.Grant, error) {
	if r.Name != h.Name {
		return driver.Grant{}, nil
	}
	c, err := b.master(ctx, r.Name)
	if err != nil {
		return driver.Grant{}, err
	}
	k := keysFor(r.Name)
	return transferOn(ctx, c, b.replicas, b.wait, transferScript, []string{k.lock(), k.fence()}, h, r)
}

// transferOn runs a transfer script (scripts/transfer.lua, alone or
// behind a check) on c with keys, when replicas > 0 acknowledged by that
// many replicas within wait.
func transferOn(ctx context.Context, c redis.Scripter, replicas int, wait time.Duration, script *redis.Script, keys []string, h driver.Hold, r driver.Request) (driver.Grant, error) {
	cmd, unconfirmed := runReplicated(ctx, c, replicas, wait, script, keys,
		h.Owner, holdOf(h), strconv.FormatUint(h.Token, 10), r.Owner, ms(r.TTL), r.Payload)
	token, err := cmd.Int64()
	if err != nil {
		return driver.Grant{}, err
	}
	if token == 0 {
		return driver.Grant{}, nil
	}
	if unconfirmed != nil {
		return driver.Grant{}, unconfirmed
	}
	return driver.Grant{Acquired: true, Token: uint64(token), Handle: r.Owner}, nil
}

// Identity implements dlock.Identifier: the server's address, the same in
// every process, so MultiLock orders parts on several deployments alike.
func (b *backend) Identity() string { return "redis:" + addressOf(b.client) }

func addressOf(c redis.UniversalClient) string {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		addrs := slices.Clone(c.Options().Addrs)
		slices.Sort(addrs)
		return strings.Join(addrs, ",")
	}
	return fmt.Sprintf("%T", c)
}

// Subscribe listens on the lock's channel, for a release that wakes
// this Locker's waiter by its id, or every waiter.
func (b *backend) Subscribe(ctx context.Context, r driver.Request) (<-chan struct{}, func(), error) {
	channel := keysFor(r.Name).channel()
	wake, cancel, err := b.notifier.subscribe(ctx, channel)
	if err != nil {
		return nil, nil, err
	}
	return wake, b.notifier.target(channel, b.id, wake, cancel), nil
}

func (b *backend) SubscribeLive(r driver.Request) (<-chan struct{}, func(), bool) {
	var channel string
	wake, cancel, ok := b.notifier.subscribeLive(func() string {
		channel = keysFor(r.Name).channel()
		return channel
	})
	if !ok {
		return nil, nil, false
	}
	return wake, b.notifier.target(channel, b.id, wake, cancel), true
}

// KeepsPayload implements driver.PayloadKeeper: the payload is a field of
// the lock's hash.
func (*backend) KeepsPayload() bool { return true }

// A free name also reports how long a restarted server still holds its
// grants back (Holder.HeldBack).
func (b *backend) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	h, ok, err := inspectOn(ctx, b.client, name)
	if err != nil || ok {
		return h.Holder, ok, err
	}
	wait, err := heldBackScript.Run(ctx, b.client, []string{keysFor(name).fence()}, b.restarts.arg(ctx), ms(b.ttl)).Int64()
	if err != nil {
		return dlock.Holder{}, false, err
	}
	return dlock.Holder{HeldBack: timeunit.Of(wait, time.Millisecond)}, false, nil
}

// List implements dlock.Lister: the lock keys whose names start with
// prefix (SCAN, on every master of a cluster), each with its holder, in
// name order.
func (b *backend) List(ctx context.Context, prefix string, limit int) ([]dlock.Held, error) {
	match := Prefix + "{" + globEscaper.Replace(tagEscaper.Replace(prefix)) + "*}"
	var (
		mu    sync.Mutex
		names []string
	)
	scan := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			tag := strings.TrimSuffix(strings.TrimPrefix(iter.Val(), Prefix+"{"), "}")
			mu.Lock()
			names = append(names, tagUnescaper.Replace(tag))
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	switch c := b.client.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		return nil, fmt.Errorf("redislock: List: %T cannot be scanned: %w", c, errors.ErrUnsupported)
	}
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var held []dlock.Held
	for _, name := range slices.Compact(names) {
		if len(held) == limit {
			break
		}
		h, ok, err := inspectOn(ctx, b.client, name)
		if err != nil {
			return nil, err
		}
		if ok {
			held = append(held, h)
		}
	}
	return held, nil
}

// ForceRelease implements dlock.ForceReleaser: it deletes the lock's
// hash if it still holds the holder read, and wakes the next waiter
// (scripts/force_release.lua); the holder's next renewal finds the lock
// gone.
func (b *backend) ForceRelease(ctx context.Context, name string) (dlock.Holder, bool, error) {
	c, err := b.master(ctx, name)
	if err != nil {
		return dlock.Holder{}, false, err
	}
	k := keysFor(name)
	for {
		h, ok, err := inspectOn(ctx, c, name)
		if err != nil || !ok {
			return dlock.Holder{}, false, err
		}
		n, err := forceReleaseScript.Run(ctx, c, []string{k.lock(), k.lockWaiters()}, h.Owner, k.channel(),
			b.notifier.publishCommand(), ms(keepFor)).Int()
		if err != nil {
			return dlock.Holder{}, false, err
		}
		if n == 1 {
			return h.Holder, true, nil
		}
	}
}

// globEscaper escapes the characters SCAN's MATCH pattern gives a meaning.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// tagUnescaper undoes tagEscaper.
var tagUnescaper = strings.NewReplacer("%7D", "}", "%7B", "{", "%25", "%")

// inspectOn reads name's holder on c, and how many wait for it: the
// Lockers with an entry among its waiters (scripts/lock_waiters.lua) and,
// for the fair lock, the waiters in its queue.
func inspectOn(ctx context.Context, c redis.Cmdable, name string) (dlock.Held, bool, error) {
	k := keysFor(name)
	pipe := c.Pipeline()
	all := pipe.HGetAll(ctx, k.lock())
	pttl := pipe.PTTL(ctx, k.lock())
	waiters := pipe.ZCard(ctx, k.lockWaiters())
	queued := pipe.LLen(ctx, k.queue())
	now := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return dlock.Held{}, false, err
	}
	h := dlock.Held{Name: name, Waiters: int(waiters.Val() + queued.Val())}
	for field, v := range all.Val() {
		switch {
		case field == "\x00t":
			t, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return dlock.Held{}, false, fmt.Errorf("redislock: %q holds a malformed token %q", name, v)
			}
			h.Token = t
		case field == "\x00p":
			h.Payload = v
		case field == "\x00a":
			if at, err := strconv.ParseInt(v, 10, 64); err == nil {
				h.Age = timeunit.AgeOfUnixMilli(at, now.Val())
			}
		case !strings.HasPrefix(field, "\x00"):
			h.Owner = field
		}
	}
	if h.Owner == "" {
		return dlock.Held{}, false, nil
	}
	h.TTL = pttl.Val()
	return h, true, nil
}

// DBSystem implements driver.DBSystem.
func (*backend) DBSystem() string { return "redis" }
