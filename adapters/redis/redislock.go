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
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errjoin"
)

// Locker is a Redis lock client, safe for concurrent use by every
// goroutine of a process.
type Locker struct {
	*dlock.Client
	notifier *notifierRef
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
	if client == nil {
		return nil, errors.New("redislock: nil client")
	}
	n := notifierFor(client)
	b := &backend{client: client, notifier: n}
	c, err := dlock.NewClient(handing{b}, opts...)
	if err != nil {
		return nil, failed(err, n)
	}
	if err := only(c.Config(), "New", replicasKey{}); err != nil {
		return nil, failed(err, n)
	}
	if b.replicas, err = replicasOf(c.Config(), client); err != nil {
		return nil, failed(err, n)
	}
	b.wait = waitTimeout(c.Config().TTL)
	return &Locker{Client: c, notifier: n}, nil
}

// Close ends every lease of l, releases their locks (see
// dlock.Client.Close), and closes l's pub/sub connection.
func (l *Locker) Close(ctx context.Context) error {
	return errjoin.Join(l.Client.Close(ctx), l.notifier.release())
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
}

var (
	_ driver.Backend       = (*backend)(nil)
	_ driver.LiveNotifier  = (*backend)(nil)
	_ driver.DeadlineBound = (*backend)(nil)
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

func ms(d time.Duration) int64 { return max(1, int64((d+time.Millisecond-1)/time.Millisecond)) }

// acquireOn runs the acquire script on one server.
func acquireOn(ctx context.Context, c redis.Scripter, r driver.Request, hold string, incr bool) (driver.Grant, error) {
	return acquireWith(ctx, c, r, hold, incr, 0, 0)
}

// acquireWith is acquireOn that, when replicas > 0, has the grant
// acknowledged by that many replicas within wait, and refuses it
// (releases it, returns ErrNotReplicated) when they do not.
func acquireWith(ctx context.Context, c redis.Scripter, r driver.Request, hold string, incr bool, replicas int, wait time.Duration) (driver.Grant, error) {
	k := keysFor(r.Name)
	cmd, unconfirmed := runReplicated(ctx, c, replicas, wait, acquireScript, []string{k.lock(), k.fence()}, r.Owner, ms(r.TTL), hold, luaBool(incr), luaBool(r.Wait))
	res, err := cmd.Int64Slice()
	if err != nil {
		return driver.Grant{}, err
	}
	if len(res) != 2 {
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
	return driver.Grant{RetryAfter: time.Duration(max(res[1], 0)) * time.Millisecond}, nil
}

func (b *backend) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	c, err := b.master(ctx, r.Name)
	if err != nil {
		return driver.Grant{}, err
	}
	return acquireWith(ctx, c, r, r.Owner, true, b.replicas, b.wait)
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
	c, err := b.master(ctx, h.Name)
	if err != nil {
		return err
	}
	return refreshWith(ctx, c, h, b.replicas, b.wait)
}

// releaseOn releases h on one server; a zero h.Token matches any token.
func releaseOn(ctx context.Context, c redis.Scripter, h driver.Hold, publish string) error {
	k := keysFor(h.Name)
	token := ""
	if h.Token != 0 {
		token = strconv.FormatUint(h.Token, 10)
	}
	left, err := releaseScript.Run(ctx, c, []string{k.lock()}, h.Owner, holdOf(h), token, k.channel(), publish).Int64()
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
		h.Owner, holdOf(h), strconv.FormatUint(h.Token, 10), r.Owner, ms(r.TTL))
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

func (b *backend) Subscribe(ctx context.Context, r driver.Request) (<-chan struct{}, func(), error) {
	return b.notifier.subscribe(ctx, keysFor(r.Name).channel())
}

func (b *backend) SubscribeLive(r driver.Request) (<-chan struct{}, func(), bool) {
	return b.notifier.subscribeLive(func() string { return keysFor(r.Name).channel() })
}

func (b *backend) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	return inspectOn(ctx, b.client, name)
}

func inspectOn(ctx context.Context, c redis.Cmdable, name string) (dlock.Holder, bool, error) {
	k := keysFor(name)
	pipe := c.Pipeline()
	all := pipe.HGetAll(ctx, k.lock())
	pttl := pipe.PTTL(ctx, k.lock())
	if _, err := pipe.Exec(ctx); err != nil {
		return dlock.Holder{}, false, err
	}
	var h dlock.Holder
	for field, v := range all.Val() {
		switch {
		case field == "\x00t":
			t, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return dlock.Holder{}, false, fmt.Errorf("redislock: %q holds a malformed token %q", name, v)
			}
			h.Token = t
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
