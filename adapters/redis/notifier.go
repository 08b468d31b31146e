package redislock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/internal/errjoin"
)

// notifier is one pub/sub connection shared by every waiter of a Locker
// (on a Cluster, one per channel, each on the node serving the channel's
// slot). A channel is subscribed while someone waits on it; subscribe
// returns only after the server confirmed the subscription, so no release
// after it is missed.
type notifier struct {
	client  redis.UniversalClient
	sharded bool // Cluster: sharded pub/sub (SSUBSCRIBE/SPUBLISH)

	mu        sync.Mutex
	ps        *redis.PubSub            // not sharded
	sps       map[string]*redis.PubSub // sharded, by channel
	waiters   map[string]map[chan struct{}]struct{}
	confirmed map[string]bool
	pending   map[string][]chan struct{} // closed on confirmation
	closed    bool
}

func newNotifier(c redis.UniversalClient) *notifier {
	_, sharded := c.(*redis.ClusterClient)
	return &notifier{
		client:    c,
		sharded:   sharded,
		sps:       map[string]*redis.PubSub{},
		waiters:   map[string]map[chan struct{}]struct{}{},
		confirmed: map[string]bool{},
		pending:   map[string][]chan struct{}{},
	}
}

func (n *notifier) publishCommand() string {
	if n.sharded {
		return "spublish"
	}
	return "publish"
}

func (n *notifier) subscribe(ctx context.Context, channel string) (<-chan struct{}, func(), error) {
	wake := make(chan struct{}, 1)
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil, nil, errors.New("redislock: locker closed")
	}
	if n.ps == nil && !n.sharded {
		n.ps = n.client.Subscribe(context.WithoutCancel(ctx))
		go n.run(n.ps)
	}
	if n.waiters[channel] == nil {
		n.waiters[channel] = map[chan struct{}]struct{}{}
	}
	n.waiters[channel][wake] = struct{}{}
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
				n.removeLocked(channel, wake)
				n.mu.Unlock()
				return nil, nil, err
			}
		}
	}
	n.mu.Unlock()

	var once sync.Once
	cancel := func() { once.Do(func() { n.remove(channel, wake) }) }
	if confirmed != nil {
		select {
		case <-confirmed:
		case <-ctx.Done():
			cancel()
			return nil, nil, ctx.Err()
		}
	}
	return wake, cancel, nil
}

func (n *notifier) remove(channel string, wake chan struct{}) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.removeLocked(channel, wake)
}

// idleUnsubscribe is how long a channel stays subscribed with no waiter,
// so a Locker that waits on the same name again soon pays nothing.
const idleUnsubscribe = time.Second

func (n *notifier) removeLocked(channel string, wake chan struct{}) {
	delete(n.waiters[channel], wake)
	if len(n.waiters[channel]) > 0 || n.ps == nil && n.sps[channel] == nil || n.closed {
		return
	}
	delete(n.waiters, channel)
	if len(n.pending[channel]) > 0 {
		return // a subscription is in flight; its confirmation cleans up
	}
	time.AfterFunc(idleUnsubscribe, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if len(n.waiters[channel]) > 0 || len(n.pending[channel]) > 0 || !n.confirmed[channel] || n.closed {
			return
		}
		delete(n.confirmed, channel)
		if n.sharded {
			_ = n.sps[channel].Close()
			delete(n.sps, channel)
		} else {
			_ = n.ps.Unsubscribe(context.Background(), channel)
		}
	})
}

// run delivers messages and confirmations until the PubSub is closed.
// go-redis reconnects and resubscribes by itself; the new "subscribe"
// confirmation then wakes that channel's waiters, since a release may
// have been missed while the connection was down.
func (n *notifier) run(ps *redis.PubSub) {
	for m := range ps.ChannelWithSubscriptions() {
		n.mu.Lock()
		switch m := m.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				n.confirmed[m.Channel] = true
				for _, c := range n.pending[m.Channel] {
					close(c)
				}
				delete(n.pending, m.Channel)
				if len(n.waiters[m.Channel]) == 0 {
					// Every waiter left while the subscription was in flight.
					n.removeLocked(m.Channel, nil)
				}
				n.wakeLocked(m.Channel)
			case "unsubscribe", "sunsubscribe":
				if len(n.pending[m.Channel]) == 0 {
					delete(n.confirmed, m.Channel)
				}
			}
		case *redis.Message:
			n.wakeLocked(m.Channel)
		}
		n.mu.Unlock()
	}
}

func (n *notifier) wakeLocked(channel string) {
	for w := range n.waiters[channel] {
		select {
		case w <- struct{}{}:
		default:
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
