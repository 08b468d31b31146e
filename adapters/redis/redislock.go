package redislock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errjoin"
)

// Locker is a Redis lock client, safe for concurrent use by every
// goroutine of a process.
type Locker struct {
	*dlock.Client
	notifier *notifier
}

var (
	_ dlock.Locker    = (*Locker)(nil)
	_ dlock.Inspector = (*Locker)(nil)
)

// New returns a Locker on client: a single server (*redis.Client), a
// Sentinel failover client or a Cluster (*redis.ClusterClient, which uses
// sharded pub/sub). New does no I/O; client stays the caller's. Each hold
// is its own owner on the server (the Locker's label, '#', a random id).
func New(client redis.UniversalClient, opts ...dlock.Option) (*Locker, error) {
	if client == nil {
		return nil, errors.New("redislock: nil client")
	}
	n := newNotifier(client)
	c, err := dlock.NewClient(&backend{client: client, notifier: n}, opts...)
	if err != nil {
		return nil, err
	}
	return &Locker{Client: c, notifier: n}, nil
}

// Close ends every lease of l, releases their locks (see
// dlock.Client.Close), and closes l's pub/sub connection.
func (l *Locker) Close(ctx context.Context) error {
	return errjoin.Join(l.Client.Close(ctx), l.notifier.close())
}

// backend implements dlock.Backend on one Redis deployment. A hold's
// Handle is its hold id, naming the hold in the lock's hash: the request's
// owner id, unique to the hold, so a hold whose acquire reply was lost can
// be released by its owner id alone.
type backend struct {
	client   redis.UniversalClient
	notifier *notifier
}

var (
	_ dlock.Backend   = (*backend)(nil)
	_ dlock.Notifier  = (*backend)(nil)
	_ dlock.Inspector = (*backend)(nil)
)

// holdOf is h's hold id: its Handle, or for the release of an acquire
// whose outcome is unknown (nil Handle), the owner id the acquire used.
func holdOf(h dlock.Hold) string {
	if id, ok := h.Handle.(string); ok {
		return id
	}
	return h.Owner
}

func ms(d time.Duration) int64 { return max(1, int64((d+time.Millisecond-1)/time.Millisecond)) }

// acquireOn runs the acquire script on one server.
func acquireOn(ctx context.Context, c redis.Scripter, r dlock.Request, hold string, incr bool) (dlock.Grant, error) {
	k := keysFor(r.Name)
	flag := "0"
	if incr {
		flag = "1"
	}
	res, err := acquireScript.Run(ctx, c, []string{k.lock, k.fence}, r.Owner, ms(r.TTL), hold, flag).Int64Slice()
	if err != nil {
		return dlock.Grant{}, err
	}
	if len(res) != 2 {
		return dlock.Grant{}, fmt.Errorf("redislock: acquire script returned %v", res)
	}
	if res[0] == 1 {
		return dlock.Grant{Acquired: true, Token: uint64(res[1]), Handle: hold}, nil
	}
	return dlock.Grant{RetryAfter: time.Duration(max(res[1], 0)) * time.Millisecond}, nil
}

func (b *backend) Acquire(ctx context.Context, r dlock.Request) (dlock.Grant, error) {
	return acquireOn(ctx, b.client, r, r.Owner, true)
}

func refreshOn(ctx context.Context, c redis.Scripter, h dlock.Hold) error {
	k := keysFor(h.Name)
	ok, err := refreshScript.Run(ctx, c, []string{k.lock}, ms(h.TTL), holdOf(h), strconv.FormatUint(h.Token, 10)).Int64()
	if err != nil {
		return err
	}
	if ok != 1 {
		return fmt.Errorf("%w: %q with token %d is gone from the server", dlock.ErrNotHeld, h.Name, h.Token)
	}
	return nil
}

func (b *backend) Refresh(ctx context.Context, h dlock.Hold) error {
	return refreshOn(ctx, b.client, h)
}

// releaseOn releases h on one server; a zero h.Token matches any token.
func releaseOn(ctx context.Context, c redis.Scripter, h dlock.Hold, publish string) error {
	k := keysFor(h.Name)
	token := ""
	if h.Token != 0 {
		token = strconv.FormatUint(h.Token, 10)
	}
	left, err := releaseScript.Run(ctx, c, []string{k.lock}, h.Owner, holdOf(h), token, k.channel, publish).Int64()
	if err != nil {
		return err
	}
	if left < 0 {
		return fmt.Errorf("%w: %q with token %d was not held", dlock.ErrNotHeld, h.Name, h.Token)
	}
	return nil
}

func (b *backend) Release(ctx context.Context, h dlock.Hold) error {
	return releaseOn(ctx, b.client, h, b.notifier.publishCommand())
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

func (b *backend) Subscribe(ctx context.Context, r dlock.Request) (<-chan struct{}, func(), error) {
	return b.notifier.subscribe(ctx, keysFor(r.Name).channel)
}

func (b *backend) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	return inspectOn(ctx, b.client, name)
}

func inspectOn(ctx context.Context, c redis.Cmdable, name string) (dlock.Holder, bool, error) {
	k := keysFor(name)
	pipe := c.Pipeline()
	all := pipe.HGetAll(ctx, k.lock)
	pttl := pipe.PTTL(ctx, k.lock)
	if _, err := pipe.Exec(ctx); err != nil {
		return dlock.Holder{}, false, err
	}
	var h dlock.Holder
	for field, v := range all.Val() {
		switch {
		case field == "\x00t":
			h.Token, _ = strconv.ParseUint(v, 10, 64)
		case !strings.HasPrefix(field, "\x00"):
			h.Owner = field
		}
	}
	if h.Owner == "" {
		return dlock.Holder{}, false, nil
	}
	h.TTL = pttl.Val()
	return h, true, nil
}
