package redislock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
)

// ReadWrite is a read-write lock: any number of readers, or one writer.
// Read and Write are Lockers of the same owner, so each is re-entrant and
// a writer may take the read lock too (downgrade: unlock the write lease
// and it keeps reading). A reader cannot upgrade: two would wait for each
// other forever. Renewal, fencing and lease loss are as for New's lock;
// readers get the token of the last writer.
type ReadWrite struct {
	Read, Write *Locker
}

// NewReadWrite returns a read-write lock client for one owner. It does no
// I/O; client stays the caller's. Close both Lockers when done.
func NewReadWrite(client redis.UniversalClient, opts ...dlock.Option) (*ReadWrite, error) {
	if client == nil {
		return nil, errors.New("redislock: nil client")
	}
	cfg, err := dlock.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	opts = append(opts, dlock.WithOwner(cfg.Owner)) // one owner for both
	rw := &ReadWrite{}
	for _, mode := range []string{"read", "write"} {
		n := newNotifier(client)
		c, err := dlock.NewClient(&rwBackend{client: client, notifier: n, mode: mode}, opts...)
		if err != nil {
			return nil, err
		}
		l := &Locker{Client: c, notifier: n}
		if mode == "read" {
			rw.Read = l
		} else {
			rw.Write = l
		}
	}
	return rw, nil
}

type rwBackend struct {
	client   redis.UniversalClient
	notifier *notifier
	mode     string
}

var (
	_ dlock.Backend   = (*rwBackend)(nil)
	_ dlock.Notifier  = (*rwBackend)(nil)
	_ dlock.Inspector = (*rwBackend)(nil)
)

func rwKeys(name string) []string {
	k := keysFor(name)
	return []string{k.lock + ":rw", k.fence, k.lock + ":rw-holds"}
}

func (b *rwBackend) run(ctx context.Context, op, name, owner, hold string, ttl time.Duration) ([]int64, error) {
	return rwlockScript.Run(ctx, b.client, rwKeys(name), op, owner, hold, ms(ttl),
		keysFor(name).lock+":rw-released", b.notifier.publishCommand()).Int64Slice()
}

func (b *rwBackend) Acquire(ctx context.Context, r dlock.Request) (dlock.Grant, error) {
	hold := holdID()
	res, err := b.run(ctx, b.mode, r.Name, r.Owner, hold, r.TTL)
	if err != nil {
		return dlock.Grant{}, err
	}
	if len(res) != 2 {
		return dlock.Grant{}, fmt.Errorf("redislock: rwlock script returned %v", res)
	}
	if res[0] == 1 {
		return dlock.Grant{Acquired: true, Token: uint64(res[1]), Handle: hold}, nil
	}
	return dlock.Grant{RetryAfter: time.Duration(max(res[1], 1)) * time.Millisecond}, nil
}

func (b *rwBackend) Refresh(ctx context.Context, h dlock.Hold) error {
	res, err := b.run(ctx, "refresh", h.Name, h.Owner, h.Handle.(string), h.TTL)
	if err != nil {
		return err
	}
	if len(res) != 1 || res[0] != 1 {
		return fmt.Errorf("%w: %s lock %q is gone from the server", dlock.ErrNotHeld, b.mode, h.Name)
	}
	return nil
}

func (b *rwBackend) Release(ctx context.Context, h dlock.Hold) error {
	res, err := b.run(ctx, "release", h.Name, h.Owner, h.Handle.(string), h.TTL)
	if err != nil {
		return err
	}
	if len(res) != 1 || res[0] != 0 {
		return fmt.Errorf("%w: %s lock %q was not held", dlock.ErrNotHeld, b.mode, h.Name)
	}
	return nil
}

func (b *rwBackend) Subscribe(ctx context.Context, name string) (<-chan struct{}, func(), error) {
	return b.notifier.subscribe(ctx, keysFor(name).lock+":rw-released")
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
			var h dlock.Holder
			h.Owner = owner
			fmt.Sscan(all["\x00t"], &h.Token)
			h.TTL = b.client.PTTL(ctx, k[0]).Val()
			return h, true, nil
		}
	}
	return dlock.Holder{}, false, nil
}
