package redislock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// ReadWrite is a read-write lock: any number of readers, or one writer.
// Read and Write are sibling Lockers (see dlock.Client.NewSibling): a call
// chain that holds the write lock (its ctx carries the write lease, see
// dlock.ContextWithLease) may take the read lock too (downgrade: unlock
// the write lease and it keeps reading). A reader cannot upgrade: two
// would wait for each other forever. Renewal, fencing and lease loss are
// as for New's lock; readers get the token of the last writer.
//
// The read-write lock keeps its own keys: a plain Locker (New) and the
// read-write lock of one name do not exclude each other.
type ReadWrite struct {
	Read, Write *Locker
}

// NewReadWrite returns a read-write lock client, shared by every goroutine
// of a process. It does no
// I/O; client stays the caller's. Close both Lockers when done.
func NewReadWrite(client redis.UniversalClient, opts ...dlock.Option) (*ReadWrite, error) {
	if err := checkClient(client); err != nil {
		return nil, err
	}
	rn, wn := notifierFor(client), notifierFor(client)
	w, err := dlock.NewClient(&rwBackend{client: client, notifier: wn, mode: "write"}, opts...)
	if err != nil {
		return nil, failed(err, rn, wn)
	}
	if err := only(w.Config(), "NewReadWrite"); err != nil {
		return nil, failed(err, rn, wn)
	}
	r, err := w.NewSibling(&rwBackend{client: client, notifier: rn, mode: "read"})
	if err != nil {
		return nil, failed(err, rn, wn)
	}
	return &ReadWrite{Read: &Locker{Client: r, notifier: rn}, Write: &Locker{Client: w, notifier: wn}}, nil
}

type rwBackend struct {
	client   redis.UniversalClient
	notifier *notifierRef
	mode     string
}

var (
	_ driver.Backend      = (*rwBackend)(nil)
	_ driver.LiveNotifier = (*rwBackend)(nil)
	_ driver.Sharer       = (*rwBackend)(nil)
	_ dlock.Inspector     = (*rwBackend)(nil)
)

func rwKeys(name string) []string {
	k := keysFor(name)
	return []string{k.lock() + ":rw", k.fence(), k.lock() + ":rw-holds"}
}

// run runs op of the read-write script; wait says a read or write attempt
// will wait if not granted.
func (b *rwBackend) run(ctx context.Context, op, name, owner, hold string, ttl time.Duration, wait bool) ([]int64, error) {
	return rwlockScript.Run(ctx, b.client, rwKeys(name), op, owner, hold, ms(ttl),
		keysFor(name).rwChannel(), b.notifier.publishCommand(), luaBool(wait)).Int64Slice()
}

// SharesHolds implements driver.Sharer: readers' holds coexist.
func (b *rwBackend) SharesHolds() bool { return b.mode == "read" }

// holdID is the hold id of owner's hold of this side: read and write holds
// of one call chain share the owner id.
func (b *rwBackend) holdID(owner string) string { return b.mode + ":" + owner }

func (b *rwBackend) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	hold := b.holdID(r.Owner)
	res, err := b.run(ctx, b.mode, r.Name, r.Owner, hold, r.TTL, r.Wait)
	if err != nil {
		return driver.Grant{}, err
	}
	if !isReply(res) {
		return driver.Grant{}, fmt.Errorf("redislock: rwlock script returned %v", res)
	}
	if res[0] == 1 {
		return driver.Grant{Acquired: true, Token: uint64(res[1]), Handle: hold}, nil
	}
	return notGranted(res, 1), nil
}

func (b *rwBackend) Refresh(ctx context.Context, h driver.Hold) error {
	res, err := b.run(ctx, "refresh", h.Name, h.Owner, b.holdID(h.Owner), h.TTL, false)
	if err != nil {
		return err
	}
	if len(res) != 1 || res[0] != 1 {
		return fmt.Errorf("%w: %s lock %q is gone from the server", dlock.ErrNotHeld, b.mode, h.Name)
	}
	return nil
}

func (b *rwBackend) Release(ctx context.Context, h driver.Hold) error {
	res, err := b.run(ctx, "release", h.Name, h.Owner, b.holdID(h.Owner), h.TTL, false)
	if err != nil {
		return err
	}
	if len(res) != 1 || res[0] != 0 {
		return fmt.Errorf("%w: %s lock %q was not held", dlock.ErrNotHeld, b.mode, h.Name)
	}
	return nil
}

// Identity implements dlock.Identifier.
func (b *rwBackend) Identity() string { return "redis-rw-" + b.mode + ":" + addressOf(b.client) }

func (b *rwBackend) Subscribe(ctx context.Context, r driver.Request) (<-chan struct{}, func(), error) {
	return b.notifier.subscribe(ctx, keysFor(r.Name).rwChannel())
}

func (b *rwBackend) SubscribeLive(r driver.Request) (<-chan struct{}, func(), bool) {
	return b.notifier.subscribeLive(func() string { return keysFor(r.Name).rwChannel() })
}

// Inspect reports a holder of this mode: the writer, or one of the
// readers.
func (b *rwBackend) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	k := rwKeys(name)
	all, err := b.client.HGetAll(ctx, k[0]).Result()
	if err != nil {
		return dlock.Holder{}, false, err
	}
	prefix := "w:"
	if b.mode == "read" {
		prefix = "r:"
	}
	for f := range all {
		if owner, ok := strings.CutPrefix(f, prefix); ok {
			token, err := strconv.ParseUint(all["\x00t"], 10, 64)
			if err != nil {
				return dlock.Holder{}, false, fmt.Errorf("redislock: %q: unreadable token %q: %w", name, all["\x00t"], err)
			}
			h := dlock.Holder{Owner: owner, Token: token}
			h.TTL = b.client.PTTL(ctx, k[0]).Val()
			return h, true, nil
		}
	}
	return dlock.Holder{}, false, nil
}

// DBSystem implements driver.DBSystem.
func (*rwBackend) DBSystem() string { return "redis" }
