package redislock

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/wakeup"
)

// notifier is the pub/sub transport of one redis.UniversalClient, shared
// by the waiters of every Locker, semaphore and latch on it: one
// connection (on a Cluster, one per channel, each on the node serving the
// channel's slot). A channel is subscribed while someone waits on it;
// subscribe returns only after the server confirmed the subscription, so
// no release after it is missed. The waiters themselves are a wakeup.Hub.
type notifier struct {
	client  redis.UniversalClient
	sharded bool // Cluster: sharded pub/sub (SSUBSCRIBE/SPUBLISH)
	own     bool // not shared: its client cannot key notifiers
	hub     wakeup.Hub

	mu        sync.Mutex
	ps        *redis.PubSub            // not sharded
	sps       map[string]*redis.PubSub // sharded, by channel
	confirmed map[string]bool
	pending   map[string][]chan struct{} // closed on confirmation
	closed    bool

	// grants are the fair locks' waiters (*fairWait) by owner, to which
	// a release may publish a grant.
	grants sync.Map

	// New's Lockers on this client, by waiter id (see
	// scripts/lock_waiters.lua), and their waiters' wake channels by
	// channel and id: a release that wakes one waiter names it.
	tmu     sync.Mutex
	ids     map[string]bool
	targets map[targetKey][]<-chan struct{}
}

// targetKey is a waiter of New's lock: its channel and its Locker's id.
type targetKey struct{ channel, id string }

// notifiers are the notifiers in use, one per client.
var notifiers wakeup.Shared[redis.UniversalClient, *notifier]

// notifierRef is one user's share of a notifier.
type notifierRef struct {
	*notifier
	once sync.Once
	err  error
}

// release gives the share back, once however often it is called; the last
// share closes the notifier's connections.
func (r *notifierRef) release() error {
	r.once.Do(func() { r.err = r.unref() })
	return r.err
}

// failed returns err after giving back refs: a constructor that fails
// keeps no share.
func failed(err error, refs ...*notifierRef) error {
	errs := []error{err}
	for _, r := range refs {
		errs = append(errs, r.release())
	}
	return errjoin.Join(errs...)
}

// errNilClient is returned by every constructor given a nil client.
var errNilClient = errors.New("redislock: nil client")

// checkClient refuses a nil client, also one of a pointer type (a nil
// *redis.Client), which would fail only at the first request.
func checkClient(c redis.UniversalClient) error {
	if c == nil {
		return errNilClient
	}
	if v := reflect.ValueOf(c); v.Kind() == reflect.Pointer && v.IsNil() {
		return errNilClient
	}
	return nil
}

// notifierFor returns a share of c's notifier; give it back with release.
// A client that cannot key a map (a wrapper passed by value that holds a
// slice or a map, say, directly or inside another wrapper) gets a notifier
// of its own, and so one pub/sub connection per user, rather than a panic.
func notifierFor(c redis.UniversalClient) *notifierRef {
	if !reflect.ValueOf(c).Comparable() {
		n := newNotifier(c)
		n.own = true
		return &notifierRef{notifier: n}
	}
	return &notifierRef{notifier: notifiers.Get(c, func() *notifier { return newNotifier(c) })}
}

func newNotifier(c redis.UniversalClient) *notifier {
	_, sharded := c.(*redis.ClusterClient)
	return &notifier{
		client:    c,
		sharded:   sharded,
		sps:       map[string]*redis.PubSub{},
		confirmed: map[string]bool{},
		pending:   map[string][]chan struct{}{},
		ids:       map[string]bool{},
		targets:   map[targetKey][]<-chan struct{}{},
	}
}

// unref gives back one use of n; the last closes its connections.
func (n *notifier) unref() error {
	if !n.own && !notifiers.Release(n.client) {
		return nil
	}
	return n.close()
}

func (n *notifier) publishCommand() string {
	if n.sharded {
		return "spublish"
	}
	return "publish"
}

// subscribe registers a waiter on channel and returns once the channel's
// subscription is confirmed.
func (n *notifier) subscribe(ctx context.Context, channel string) (<-chan struct{}, func(), error) {
	wake, remove := n.hub.Add(channel)
	cancel := func() {
		if remove() {
			n.idle(channel)
		}
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		remove()
		return nil, nil, errors.New("redislock: locker closed")
	}
	if n.ps == nil && !n.sharded {
		n.ps = n.client.Subscribe(context.WithoutCancel(ctx))
		go n.run(n.ps)
	}
	var confirmed chan struct{}
	if !n.confirmed[channel] {
		confirmed = make(chan struct{})
		first := len(n.pending[channel]) == 0
		n.pending[channel] = append(n.pending[channel], confirmed)
		if first {
			var err error
			if n.sharded {
				// A connection of its own, to the node that serves the
				// channel's slot (go-redis picks it from the channel).
				if n.sps[channel] == nil {
					ps := n.client.SSubscribe(context.WithoutCancel(ctx), channel)
					n.sps[channel] = ps
					go n.run(ps)
				} else {
					err = n.sps[channel].SSubscribe(ctx, channel)
				}
			} else {
				err = n.ps.Subscribe(ctx, channel)
			}
			if err != nil {
				delete(n.pending, channel)
				n.mu.Unlock()
				cancel()
				return nil, nil, err
			}
		}
	}
	n.mu.Unlock()
	if confirmed != nil {
		select {
		case <-confirmed:
		case <-ctx.Done():
			cancel()
			return nil, nil, ctx.Err()
		}
		// The caller tries again before it waits on wake, which answers
		// any wake-up until now (the confirmation's, see run).
		select {
		case <-wake:
		default:
		}
	}
	return wake, cancel, nil
}

// subscribeLive registers a waiter on the channel that channelOf names
// if the channel's subscription is confirmed, with no I/O; ok false
// otherwise. While confirmed, the channel cannot be unsubscribed behind
// the waiter (idle checks for waiters under n.mu), and a reconnection's
// new confirmation wakes it, as it wakes every waiter. channelOf runs
// only when some channel is subscribed: an uncontended Lock builds no
// name.
func (n *notifier) subscribeLive(channelOf func() string) (wake <-chan struct{}, cancel func(), ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || len(n.confirmed) == 0 {
		return nil, nil, false
	}
	channel := channelOf()
	if !n.confirmed[channel] {
		return nil, nil, false
	}
	wake, remove := n.hub.Add(channel)
	return wake, func() {
		if remove() {
			n.idle(channel)
		}
	}, true
}

// addWaiterID registers a New Locker's waiter id, so that a wake-up
// sent to it when none of its waiters is left passes on (wakeTarget).
func (n *notifier) addWaiterID(id string) {
	n.tmu.Lock()
	defer n.tmu.Unlock()
	n.ids[id] = true
}

// removeWaiterID forgets a closed Locker's waiter id.
func (n *notifier) removeWaiterID(id string) {
	n.tmu.Lock()
	defer n.tmu.Unlock()
	delete(n.ids, id)
}

// target registers wake, a waiter subscribed on channel, as the waiter
// of the Locker with id, and returns what ends both (cancel is the
// subscription's).
func (n *notifier) target(channel, id string, wake <-chan struct{}, cancel func()) func() {
	k := targetKey{channel, id}
	n.tmu.Lock()
	n.targets[k] = append(n.targets[k], wake)
	n.tmu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			n.tmu.Lock()
			list := n.targets[k]
			for i, w := range list {
				if w == wake {
					list = append(list[:i:i], list[i+1:]...)
					break
				}
			}
			if len(list) == 0 {
				delete(n.targets, k)
			} else {
				n.targets[k] = list
			}
			n.tmu.Unlock()
			cancel()
		})
	}
}

// passOnTimeout bounds the request that passes on a wake-up no waiter
// of this process took.
const passOnTimeout = time.Second

// wakeTarget wakes the waiter of New's Locker id on channel, which a
// release chose. When that Locker is this process's but none of its
// waiters is there (it took the lock by a retry, gave up just now, or
// its waiter's subscription is not registered yet), the wake-up passes
// on to the next waiter, as the Locker's leave would pass it, if the
// lock is free. The Locker's entry, which the release took, is left to
// its next attempt.
func (n *notifier) wakeTarget(channel, id string) {
	n.tmu.Lock()
	list := n.targets[targetKey{channel, id}]
	mine := n.ids[id]
	n.tmu.Unlock()
	for _, wake := range list {
		if n.hub.WakeWaiter(channel, wake) {
			return
		}
	}
	lock, ok := strings.CutSuffix(channel, releasedSuffix)
	if !mine || !ok {
		return // another process's Locker, or no lock's channel
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), passOnTimeout)
		defer cancel()
		// A failed pass-on leaves the waiters to their next retry.
		_ = leave(ctx, n.client, lock, lock+lockWaitersSuffix, id, channel, n.publishCommand(), false)
	}()
}

// idleUnsubscribe is how long a channel stays subscribed with no waiter,
// so a Locker that waits on the same name again soon pays nothing.
const idleUnsubscribe = time.Second

// idle unsubscribes channel, which has no waiter left, unless one comes
// back within idleUnsubscribe.
func (n *notifier) idle(channel string) {
	time.AfterFunc(idleUnsubscribe, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.hub.Waiting(channel) > 0 || len(n.pending[channel]) > 0 || !n.confirmed[channel] || n.closed {
			return // waited on again, or its subscription's confirmation cleans up
		}
		delete(n.confirmed, channel)
		if n.sharded {
			_ = n.sps[channel].Close() // its own connection; nothing else depends on the error
			delete(n.sps, channel)
		} else {
			_ = n.ps.Unsubscribe(context.Background(), channel) // a failed unsubscribe only keeps the channel a while
		}
	})
}

// run delivers messages and confirmations until the PubSub is closed.
// go-redis reconnects and resubscribes by itself; the new "subscribe"
// confirmation then wakes that channel's waiters, since a release may
// have been missed while the connection was down.
func (n *notifier) run(ps *redis.PubSub) {
	for m := range ps.ChannelWithSubscriptions() {
		switch m := m.(type) {
		case *redis.Subscription:
			n.mu.Lock()
			switch m.Kind {
			case "subscribe", "ssubscribe":
				n.confirmed[m.Channel] = true
				// Waiters of an earlier subscription (before a
				// reconnection) may have missed releases: they look again.
				// Those that wait for this confirmation try again after
				// it anyway, and drop this wake-up (subscribe); so that
				// they find it there, it comes first.
				n.hub.Wake(m.Channel)
				for _, c := range n.pending[m.Channel] {
					close(c)
				}
				delete(n.pending, m.Channel)
				if n.hub.Waiting(m.Channel) == 0 {
					n.idle(m.Channel) // every waiter left while it was in flight
				}
			case "unsubscribe", "sunsubscribe":
				if len(n.pending[m.Channel]) == 0 {
					delete(n.confirmed, m.Channel)
				}
				n.hub.Wake(m.Channel)
			}
			n.mu.Unlock()
		case *redis.Message:
			if id, ok := strings.CutPrefix(m.Payload, "\x00n"); ok {
				n.wakeTarget(m.Channel, id) // one waiter, chosen by the release
				continue
			}
			if strings.HasPrefix(m.Payload, "g ") {
				n.deliverGrant(m.Payload) // before the wake-up, which takes it
			}
			n.hub.Wake(m.Channel)
		}
	}
}

func (n *notifier) close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	var errs []error
	for _, ps := range n.sps {
		errs = append(errs, ps.Close())
	}
	if n.ps != nil {
		errs = append(errs, n.ps.Close())
	}
	return errjoin.Join(errs...)
}
