package redislock

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/timeunit"
)

// DefaultQueueTimeout is how long a fair lock's waiter keeps its place in
// the queue without retrying; waiters retry at half of it, so only a
// waiter that died (or was cut off) loses its place.
const DefaultQueueTimeout = 5 * time.Second

// queueTimeoutKey is the key of WithQueueTimeout's setting.
type queueTimeoutKey struct{}

// WithQueueTimeout sets how long a fair lock's waiter keeps its place in
// the queue without retrying (NewFair only; default DefaultQueueTimeout,
// at least 10ms). Shorter lets the queue forget a dead waiter sooner;
// waiters retry at half of it.
func WithQueueTimeout(d time.Duration) dlock.Option { return dlock.WithSetting(queueTimeoutKey{}, d) }

// NewFair returns a fair lock: waiters get the lock in the order they
// asked for it (a FIFO queue on the server, as Redisson's RedissonFairLock).
// A release grants the lock to the first waiter itself and tells only
// that waiter, so a hand-off costs the same with 2 waiters or 200, and
// the waiter holds the lock without a request more. TryLock does not
// queue: it fails while anyone waits. A waiter whose Lock gives up leaves
// the queue at once (and gives back a grant that reached it late); one
// that dies leaves it after the queue timeout (WithQueueTimeout), and a
// grant made to it meanwhile lasts no longer than that timeout.
// Goroutines of one process queue in the process first, so each fair
// Locker has at most one entry per name in the server's queue, and a hold
// that ends while another goroutine of the Locker waits passes straight
// to it (dlock.WithHandOffs) unless another process is queued on the
// server. It does no I/O; client stays the caller's.
//
// A lease granted by a release counts from the waiter's last request
// that the server saw before the grant, for the shorter of the TTL and
// the queue timeout; the watchdog renews it within that first term.
//
// A waiter's entry in the queue starts with its Locker's channel id, on
// which a release wakes it. Fair Lockers of earlier versions of this
// package queued bare owner ids: while both kinds wait on one name, a
// hand-off between them waits for the waiter's next retry (at most half
// the queue timeout) instead of a wake-up. Nothing is granted out of turn.
func NewFair(client redis.UniversalClient, opts ...dlock.Option) (*Locker, error) {
	if err := checkClient(client); err != nil {
		return nil, err
	}
	n := notifierFor(client)
	b := newFairBackend(client, n, DefaultQueueTimeout)
	c, err := dlock.NewClient(b, opts...)
	if err != nil {
		return nil, failed(err, n)
	}
	if err := only(c.Config(), "NewFair", queueTimeoutKey{}); err != nil {
		return nil, failed(err, n)
	}
	// Inspect's hold-back (Holder.HeldBack) is the Locker's TTL's, as the
	// fair acquire script's.
	b.ttl = c.Config().TTL
	if v, ok := c.Config().Setting(queueTimeoutKey{}); ok {
		if b.queueTimeout = v.(time.Duration); b.queueTimeout < 10*time.Millisecond {
			return nil, failed(fmt.Errorf("redislock: queue timeout %v is shorter than 10ms", b.queueTimeout), n)
		}
	}
	return &Locker{Client: c, notifier: n}, nil
}

type fairBackend struct {
	backend
	queueTimeout time.Duration
	// channel is this Locker's waiter channel id (16 hex digits; see
	// scripts/fair_queue.lua): a release wakes the head of the queue on
	// it. One channel for all of a Locker's waits keeps it subscribed
	// from one contended Lock to the next, where a channel per Lock
	// cost a subscription (and the wake-up its confirmation brings) each.
	channel string
}

// KeepsPayload implements driver.PayloadKeeper: the fair lock keeps no
// payload, since a release grants the lock to the head of the queue on
// its behalf, and the queue keeps none.
func (*fairBackend) KeepsPayload() bool { return false }

// BoundsCalls is New's (see backend.BoundsCalls): on a *redis.Client with
// ContextTimeoutEnabled, attempts and releases run on the caller's
// goroutine. An attempt made again after one whose outcome is unknown is
// idempotent for its hold: a waiter already queued keeps its place (ZADD
// answers 0 for it, and only a new waiter is pushed), a hold already
// taken is not counted twice (its field), and a grant published for
// either attempt is found (fairWait keeps each attempt's send time until
// one misses).
func (b *fairBackend) BoundsCalls() bool { return b.backend.BoundsCalls() }

func newFairBackend(client redis.UniversalClient, n *notifierRef, queueTimeout time.Duration) *fairBackend {
	return &fairBackend{backend: backend{client: client, notifier: n}, queueTimeout: queueTimeout, channel: randomID()}
}

// waiter is r's id in the server's queue: the channel id, then the owner.
func (b *fairBackend) waiter(r driver.Request) string { return b.channel + r.Owner }

var (
	_ driver.Backend      = (*fairBackend)(nil)
	_ driver.LiveNotifier = (*fairBackend)(nil)
	_ driver.Leaver       = (*fairBackend)(nil)
	_ driver.Transferer   = (*fairBackend)(nil)
	_ dlock.Inspector     = (*fairBackend)(nil)
)

func (k keys) fair() []string {
	return []string{k.lock(), k.fence(), k.queue(), k.timeouts(), k.waiters()}
}

func (b *fairBackend) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	k := keysFor(r.Name)
	hold := r.Owner
	wait, attempt := "0", uint64(0)
	var w *fairWait
	if r.Wait {
		w = b.notifier.fairWait(r.Owner)
		if g, ok := w.take(); ok {
			// A release granted it to this waiter and said so.
			b.notifier.grants.Delete(r.Owner)
			g.Handle = hold
			return g, nil
		}
		wait, attempt = "1", w.attempt()
	}
	res, err := fairAcquireScript.Run(ctx, b.client, k.fair(), r.Owner, ms(r.TTL), hold, wait,
		ms(b.queueTimeout), k.waiterPrefix(), b.notifier.publishCommand(), b.channel, attempt).Int64Slice()
	if err != nil {
		return driver.Grant{}, err
	}
	if !isReply(res) {
		return driver.Grant{}, fmt.Errorf("redislock: fair acquire script returned %v", res)
	}
	if res[0] == 1 {
		if w != nil {
			b.notifier.grants.Delete(r.Owner)
		}
		return driver.Grant{Acquired: true, Token: uint64(res[1]), Handle: hold}, nil
	}
	if w != nil {
		w.missed(attempt)
	}
	// Retry by then at the latest: the holder's lease may run out, and
	// the queue entry must be kept fresh.
	return notGranted(res, 1), nil
}

func (b *fairBackend) Release(ctx context.Context, h driver.Hold) error {
	k := keysFor(h.Name)
	token := ""
	if h.Token != 0 {
		token = strconv.FormatUint(h.Token, 10)
	}
	left, err := fairReleaseScript.Run(ctx, b.client, k.fair(), h.Owner, holdOf(h), token,
		k.waiterPrefix(), b.notifier.publishCommand()).Int64()
	if err != nil {
		return err
	}
	if left < 0 {
		return fmt.Errorf("%w: %q with token %d was not held", dlock.ErrNotHeld, h.Name, h.Token)
	}
	return nil
}

// Transfer hands h's lock straight to r.Owner, the next call chain of the
// same Locker, with a new token, in one script, as New's hand-off does;
// but only while no other waiter is queued on the server. When one is,
// nothing changes, and the release the Client makes instead grants the
// lock to that waiter: first come, first served across processes.
func (b *fairBackend) Transfer(ctx context.Context, h driver.Hold, r driver.Request) (driver.Grant, error) {
	if r.Name != h.Name {
		return driver.Grant{}, nil
	}
	// No replicas to wait for: NewFair takes no WithReplicas, and its
	// other scripts wait for none either.
	return transferOn(ctx, b.client, 0, 0, fairTransferScript, keysFor(r.Name).fair(), h, r)
}

// Leave takes r's waiter out of the queue and gives back the lock if a
// release granted it meanwhile.
func (b *fairBackend) Leave(ctx context.Context, r driver.Request) error {
	b.notifier.grants.Delete(r.Owner)
	k := keysFor(r.Name)
	return fairLeaveScript.Run(ctx, b.client, k.fair(), b.waiter(r), k.waiterPrefix(), b.notifier.publishCommand()).Err()
}

// fairWait is a waiting Lock's side of a grant that another owner's
// release makes on its behalf (hand_on in scripts/fair_queue.lua): when
// its attempts were sent, and the grant once the release published it.
// The grant names the waiter's last attempt that the server saw, and the
// lease counts from that attempt's send time, which precedes the grant.
type fairWait struct {
	mu      sync.Mutex
	sent    map[uint64]time.Time // attempts a grant may still name
	granted driver.Grant
}

// attempts numbers the fair waiters' attempts, in the whole process: a
// grant published late, for an earlier wait of the same owner, names no
// attempt of a later one.
var attempts atomic.Uint64

// attempt numbers an attempt about to be sent.
func (w *fairWait) attempt() uint64 {
	n := attempts.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent[n] = time.Now()
	return n
}

// missed records that attempt n found the lock held: a grant made
// before it would have been found, so a later grant names n or a later
// attempt.
func (w *fairWait) missed(n uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k := range w.sent {
		if k < n {
			delete(w.sent, k)
		}
	}
}

// grant records a grant published for attempt n. A grant naming an
// attempt it no longer knows is left for the waiter's next attempt,
// which finds it on the server and counts its lease from its own send.
func (w *fairWait) grant(n, token uint64, term time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if sent, ok := w.sent[n]; ok {
		w.granted = driver.Grant{Acquired: true, Token: token, Since: sent, Term: term}
	}
}

// take returns the published grant, if any.
func (w *fairWait) take() (driver.Grant, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.granted, w.granted.Acquired
}

// fairWait returns owner's fairWait, made on its first attempt; it is
// dropped when the attempts end in a grant or the waiter leaves.
func (n *notifier) fairWait(owner string) *fairWait {
	if w, ok := n.grants.Load(owner); ok {
		return w.(*fairWait)
	}
	w, _ := n.grants.LoadOrStore(owner, &fairWait{sent: map[uint64]time.Time{}})
	return w.(*fairWait)
}

// deliverGrant hands a grant published on a waiter's channel ('g
// <attempt> <token> <term ms> <owner>', see hand_on; the owner may hold
// spaces) to its waiter, if it is one of this process's and still waits.
func (n *notifier) deliverGrant(payload string) {
	var fields [3]uint64
	rest, ok := strings.CutPrefix(payload, "g ")
	if !ok {
		return
	}
	for i := range fields {
		var field string
		var err error
		if field, rest, ok = strings.Cut(rest, " "); !ok {
			return
		}
		if fields[i], err = strconv.ParseUint(field, 10, 64); err != nil {
			return
		}
	}
	if w, ok := n.grants.Load(rest); ok {
		w.(*fairWait).grant(fields[0], fields[1], timeunit.Of(int64(min(fields[2], math.MaxInt64)), time.Millisecond))
	}
}

// Subscribe listens on this Locker's channel for r's name: only the first
// waiter is told of a release.
func (b *fairBackend) Subscribe(ctx context.Context, r driver.Request) (<-chan struct{}, func(), error) {
	return b.notifier.subscribe(ctx, keysFor(r.Name).waiterPrefix()+b.channel)
}

// SubscribeLive is Subscribe on a channel already subscribed; it overrides
// the embedded backend's, whose channel is the plain lock's.
func (b *fairBackend) SubscribeLive(r driver.Request) (<-chan struct{}, func(), bool) {
	return b.notifier.subscribeLive(func() string { return keysFor(r.Name).waiterPrefix() + b.channel })
}

// DBSystem implements driver.DBSystem.
func (*fairBackend) DBSystem() string { return "redis" }
