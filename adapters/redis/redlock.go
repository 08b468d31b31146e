package redislock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/errjoin"
)

// Redlock is the Redlock algorithm over independent Redis servers behind
// dlock.Locker: a lock is held when a majority (N/2+1) of servers granted
// it within its validity (TTL − time taken − clock drift).
//
// Fencing tokens still strictly increase across holders: having a
// majority, the holder takes one more than the largest counter among
// them and writes it to a majority before the lease is returned. Any later
// majority overlaps that one, so it sees the token.
//
// Limits, honestly: Redlock assumes bounded clock drift and process
// pauses shorter than the TTL (Kleppmann's critique); a server that
// restarts without fsync'd persistence forgets both its locks and its
// counter, which can let two owners in and repeat a token. dlock's lease
// deadline and fencing token narrow this — a paused holder's Done closes
// before the validity ends, and the resource refuses its token — but they
// cannot turn a lease into a guarantee. Use it where an occasional double
// grant is tolerable with fencing; use a consensus store (ZooKeeper) where
// it is not.
type Redlock struct {
	*dlock.Client
	b *redlockBackend
}

var (
	_ dlock.Locker    = (*Redlock)(nil)
	_ dlock.Inspector = (*Redlock)(nil)
)

// NewRedlock returns a Redlock over clients, each a separate server (not
// replicas of one another); two clients of one address, or one client
// twice, are refused. Each Redlock is its own owner. It does no I/O;
// the clients stay the caller's. Configure them to fail fast
// (redis.Options MaxRetries: -1, DialerRetries: 1): a down server's
// retries eat the lease's validity.
func NewRedlock(clients []redis.UniversalClient, opts ...dlock.Option) (*Redlock, error) {
	if len(clients) == 0 {
		return nil, errors.New("redislock: Redlock needs at least one server")
	}
	seen := map[any]int{}
	for i, c := range clients {
		if checkClient(c) != nil {
			return nil, fmt.Errorf("redislock: Redlock client %d is nil", i)
		}
		server, name := serverOf(c)
		if server == nil {
			continue
		}
		if j, ok := seen[server]; ok {
			return nil, fmt.Errorf("redislock: Redlock clients %d and %d are one server (%s): a quorum needs separate servers", j, i, name)
		}
		seen[server] = i
	}
	b := &redlockBackend{clients: clients, quorum: len(clients)/2 + 1}
	for _, c := range clients {
		b.notifiers = append(b.notifiers, notifierFor(c))
	}
	c, err := dlock.NewClient(b, opts...)
	if err != nil {
		return nil, failed(err, b.notifiers...)
	}
	if err := only(c.Config(), "NewRedlock", restartWindowKey{}); err != nil {
		return nil, failed(err, b.notifiers...)
	}
	window, err := restartWindowOf(c.Config())
	if err != nil {
		return nil, failed(err, b.notifiers...)
	}
	b.restarts = &restarts{window: window}
	return &Redlock{Client: c, b: b}, nil
}

// serverOf is what tells c's server from another client's, without I/O:
// a single-server client's network address, or else the client itself,
// and how to name it in an error. Two names for one host (localhost and
// 127.0.0.1) are not caught, nor are copies of a client whose type cannot
// be compared (nil server).
func serverOf(c redis.UniversalClient) (server any, name string) {
	if rc, ok := c.(*redis.Client); ok {
		o := rc.Options()
		network := o.Network
		if network == "" {
			network = "tcp"
		}
		return network + " " + o.Addr, o.Addr
	}
	if !reflect.ValueOf(c).Comparable() {
		return nil, ""
	}
	return c, fmt.Sprintf("the same %T", c)
}

// Close ends every lease and releases its locks, then closes the pub/sub
// connections.
func (r *Redlock) Close(ctx context.Context) error {
	errs := []error{r.Client.Close(ctx)}
	for _, n := range r.b.notifiers {
		errs = append(errs, n.release())
	}
	return errjoin.Join(errs...)
}

type redlockBackend struct {
	clients   []redis.UniversalClient
	notifiers []*notifierRef
	quorum    int
	// restarts is how long a restarted server holds grants back: the
	// window alone (each server's fsync policy is not asked).
	restarts *restarts
}

var (
	_ driver.Backend  = (*redlockBackend)(nil)
	_ driver.Notifier = (*redlockBackend)(nil)
	_ dlock.Inspector = (*redlockBackend)(nil)
)

// serverTimeout bounds one server's reply, small against the TTL so a dead
// server does not eat the validity.
func serverTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), 500*time.Millisecond)
}

// each runs f on every server at once and waits for all.
func (b *redlockBackend) each(ctx context.Context, ttl time.Duration, f func(ctx context.Context, i int, c redis.UniversalClient) error) []error {
	errs := make([]error, len(b.clients))
	var wg sync.WaitGroup
	for i, c := range b.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, serverTimeout(ttl))
			defer cancel()
			errs[i] = f(sctx, i, c)
		}()
	}
	wg.Wait()
	return errs
}

func (b *redlockBackend) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	hold := r.Owner
	start := time.Now()
	grants := make([]driver.Grant, len(b.clients))
	errs := b.each(ctx, r.TTL, func(ctx context.Context, i int, c redis.UniversalClient) error {
		var err error
		grants[i], err = acquireOn(ctx, c, r, hold, false, b.restarts.arg(ctx))
		return err
	})
	var (
		got      []int
		maxToken uint64
		failed   []error
		retry    time.Duration
		heldBack []driver.HoldBack // of the servers that held the grant back
	)
	for i, g := range grants {
		switch {
		case errs[i] != nil:
			failed = append(failed, fmt.Errorf("server %d: %w", i, errs[i]))
		case g.Acquired:
			got = append(got, i)
			maxToken = max(maxToken, g.Token)
		default:
			if retry == 0 || g.RetryAfter < retry {
				retry = g.RetryAfter
			}
			if g.HeldBack.Resume > 0 {
				heldBack = append(heldBack, g.HeldBack)
			}
		}
	}
	h := driver.Hold{Name: r.Name, Owner: r.Owner, TTL: r.TTL, Handle: hold}
	if len(got) >= b.quorum {
		if g, done, err := b.fence(ctx, r, grants, maxToken+1, start); done {
			return g, err
		}
	}
	// No quorum: give back what was taken, on every server (by hold id:
	// the token differs between servers that were fenced and not). No
	// one is woken: the lock was never held, and the other contenders of
	// a split vote retry after their own random pause.
	b.each(context.WithoutCancel(ctx), r.TTL, func(ctx context.Context, i int, c redis.UniversalClient) error {
		return releaseOn(ctx, c, h, "")
	})
	if len(failed) > len(b.clients)-b.quorum {
		return driver.Grant{}, fmt.Errorf("redislock: Redlock quorum unreachable, %d of %d servers failed: %w",
			len(failed), len(b.clients), errjoin.Join(failed...))
	}
	if len(heldBack) > len(b.clients)-b.quorum {
		// Too many restarted servers hold grants back for a quorum: say
		// so, with when enough of them resume for one.
		slices.SortFunc(heldBack, func(a, b driver.HoldBack) int { return cmp.Compare(a.Resume, b.Resume) })
		quorate := heldBack[len(heldBack)-(len(b.clients)-b.quorum)-1]
		return driver.Grant{RetryAfter: max(retry, time.Millisecond), HeldBack: quorate}, nil
	}
	if len(got) > 0 {
		// A split vote between waiters: retry after a random pause so
		// they do not split again (the Redlock algorithm's advice).
		retry = time.Duration(1+rand.IntN(20)) * time.Millisecond
	}
	return driver.Grant{RetryAfter: retry}, nil
}

// fence sets token on the servers that granted the hold, a quorum. done
// is false when too few took the token, and the caller gives back what
// was taken; a quorum reached too late for the TTL is given back here.
func (b *redlockBackend) fence(ctx context.Context, r driver.Request, grants []driver.Grant, token uint64, start time.Time) (g driver.Grant, done bool, err error) {
	hold := r.Owner
	fenced := 0
	fenceErrs := b.each(ctx, r.TTL, func(ctx context.Context, i int, c redis.UniversalClient) error {
		if !grants[i].Acquired {
			return errors.New("not granted")
		}
		k := keysFor(r.Name)
		ok, err := fenceScript.Run(ctx, c, []string{k.lock(), k.fence()}, hold, token).Int64()
		if err == nil && ok != 1 {
			err = errors.New("hold gone before its token was set")
		}
		return err
	})
	for _, err := range fenceErrs {
		if err == nil {
			fenced++
		}
	}
	if fenced < b.quorum {
		return driver.Grant{}, false, nil
	}
	if validity := r.TTL - time.Since(start) - (r.TTL/100 + 2*time.Millisecond); validity > 0 {
		return driver.Grant{Acquired: true, Token: token, Handle: hold}, true, nil
	}
	h := driver.Hold{Name: r.Name, Owner: r.Owner, TTL: r.TTL, Handle: hold}
	b.each(context.WithoutCancel(ctx), r.TTL, func(ctx context.Context, i int, c redis.UniversalClient) error {
		return releaseOn(ctx, c, h, "")
	})
	return driver.Grant{}, true, fmt.Errorf("redislock: Redlock: reaching a quorum took %v, more than the %v TTL allows; raise dlock.WithTTL", time.Since(start).Round(time.Millisecond), r.TTL)
}

// quorumResult turns per-server results into one: nil when a majority
// succeeded, refused (dlock.ErrNotHeld, dlock.ErrStale) when so many
// servers refused that no majority can succeed.
func (b *redlockBackend) quorumResult(what string, errs []error, refused error) error {
	ok, refusals := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, refused):
			refusals++
		}
	}
	switch {
	case ok >= b.quorum:
		return nil
	case refusals > len(b.clients)-b.quorum:
		return fmt.Errorf("%w: %s on %d of %d servers", refused, what, refusals, len(b.clients))
	}
	return fmt.Errorf("redislock: %s confirmed by %d of %d servers, %d needed: %w", what, ok, len(b.clients), b.quorum, errjoin.Join(errs...))
}

func (b *redlockBackend) Refresh(ctx context.Context, h driver.Hold) error {
	return b.quorumResult("refresh", b.each(ctx, h.TTL, func(ctx context.Context, _ int, c redis.UniversalClient) error {
		return refreshOn(ctx, c, h)
	}), dlock.ErrNotHeld)
}

func (b *redlockBackend) Release(ctx context.Context, h driver.Hold) error {
	errs := b.each(ctx, h.TTL, func(ctx context.Context, i int, c redis.UniversalClient) error {
		return releaseOn(ctx, c, h, b.notifiers[i].publishCommand())
	})
	for _, err := range errs {
		if err == nil {
			return nil // released where it was held; elsewhere it expires
		}
	}
	return b.quorumResult("release", errs, dlock.ErrNotHeld)
}

// Subscribe listens on every server that answers, all at once, and wakes
// on any.
func (b *redlockBackend) Subscribe(ctx context.Context, r driver.Request) (<-chan struct{}, func(), error) {
	wake := make(chan struct{}, 1)
	done := make(chan struct{})
	ch := keysFor(r.Name).channel()
	wakes := make([]<-chan struct{}, len(b.notifiers))
	unsubs := make([]func(), len(b.notifiers))
	errs := b.each(ctx, time.Second, func(ctx context.Context, i int, _ redis.UniversalClient) error {
		var err error
		wakes[i], unsubs[i], err = b.notifiers[i].subscribe(ctx, ch)
		return err
	})
	var cancels []func()
	for i, w := range wakes {
		if errs[i] != nil {
			continue
		}
		cancels = append(cancels, unsubs[i])
		go func() {
			for {
				select {
				case <-w:
					select {
					case wake <- struct{}{}:
					default:
					}
				case <-done:
					return
				}
			}
		}()
	}
	if len(cancels) == 0 {
		return nil, nil, errjoin.Join(errs...)
	}
	var once sync.Once
	return wake, func() {
		once.Do(func() {
			close(done)
			for _, c := range cancels {
				c()
			}
		})
	}, nil
}

// Inspect reports the holder a majority of servers agree on.
func (b *redlockBackend) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	holders := make([]dlock.Holder, len(b.clients))
	held := make([]bool, len(b.clients))
	errs := b.each(ctx, time.Second, func(ctx context.Context, i int, c redis.UniversalClient) error {
		h, ok, err := inspectOn(ctx, c, name)
		holders[i], held[i] = h.Holder, ok
		return err
	})
	votes := map[[2]any]int{}
	answered := 0
	for i := range b.clients {
		if errs[i] != nil {
			continue
		}
		answered++
		if held[i] {
			key := [2]any{holders[i].Owner, holders[i].Token}
			if votes[key]++; votes[key] >= b.quorum {
				return holders[i], true, nil
			}
		}
	}
	if answered < b.quorum {
		return dlock.Holder{}, false, fmt.Errorf("redislock: Redlock inspect: %d of %d servers answered: %w", answered, len(b.clients), errjoin.Join(errs...))
	}
	return dlock.Holder{}, false, nil
}

// DBSystem implements driver.DBSystem.
func (*redlockBackend) DBSystem() string { return "redis" }
