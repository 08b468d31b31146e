// Package etcdlock is dlock on etcd: a lock with a key per waiter under
// the lock's prefix, each attached to a lease of its own, with a context
// on every wait.
//
// Each Lock puts the key <root>/lock/<name>/<owner> with a new lease of
// the Locker's TTL (rounded up to whole seconds, etcd's unit), in a
// transaction that also reads the oldest key under the name's prefix: the
// holder is the key with the smallest create revision, so a Lock that
// finds its own key oldest holds at once, in two requests (lease and
// transaction). A waiter watches only the key created just before its
// own, so a release wakes one waiter (no herd). While it waits, it keeps
// its lease alive, and when its lease ends on the server (a partition
// longer than the TTL) its wait fails at once, where concurrency.Mutex
// keeps waiting (etcd issue 19597). Cancelling a waiting Lock revokes its
// lease, and with it its key.
//
// The fencing token is the key's create revision: revisions increase
// across the whole cluster, and holders follow each other in create
// revision order, so tokens increase across holders.
//
// The lease is the hold's alone. The watchdog renews it (one keep-alive)
// every TTL/3 and then checks that the key is still there, so a key
// deleted by hand ends the lease at the next renewal; the lease's Done
// closes at the client's deadline, counted from the keep-alive's send,
// before the server can expire the lease (etcd counts it from receipt, in
// whole seconds, and a new leader extends every lease). A holder that
// exits without unlocking leaves nothing that lives past its TTL: there
// is no background keep-alive to outlive it (etcd issue 17470). Unlock
// revokes the hold's own lease, which deletes its key and nothing else:
// a release retried late can never delete a later hold, of this process
// or any other (etcd issue 22082).
//
// Failover. etcd commits every write on a quorum before it answers, so a
// new leader has every key and lease a holder was told it has. With the
// quorum lost, nothing is granted and nothing is renewed: holders lose
// their leases at their deadlines, before the server's leases can expire.
//
// Records (dlock.Recorder, for packages election and schedlock) live at
// <root>/record/<name>. etcd keeps no time of its own: a record's Age is
// counted from the writer's wall clock to the reader's, so it is as good
// as the hosts' clock synchronisation.
package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// Locker is an etcd lock client, safe for concurrent use by every
// goroutine of a process. Lockers may share one *clientv3.Client.
type Locker struct {
	*dlock.Client
	b *backend
}

var (
	_ dlock.Locker    = (*Locker)(nil)
	_ dlock.Inspector = (*Locker)(nil)
	_ dlock.Recorder  = (*Locker)(nil)
)

// New returns a Locker whose keys live under root (for example "dlock"),
// a key prefix with no trailing slash. It does no I/O; client stays the
// caller's, with its endpoints, credentials and timeouts.
func New(client *clientv3.Client, root string, opts ...dlock.Option) (*Locker, error) {
	if client == nil {
		return nil, errors.New("etcdlock: nil *clientv3.Client")
	}
	if root == "" || strings.HasSuffix(root, "/") || strings.ContainsRune(root, 0) {
		return nil, fmt.Errorf("etcdlock: invalid root %q: want a key prefix with no trailing slash, such as dlock", root)
	}
	b := &backend{client: client, root: root, now: time.Now}
	c, err := dlock.NewClient(b, opts...)
	if err != nil {
		return nil, err
	}
	b.recheck = c.Config().PushFallback
	return &Locker{Client: c, b: b}, nil
}

// backend makes single attempts and waits on the server (driver.Blocker).
type backend struct {
	client *clientv3.Client
	root   string
	// recheck is how long a waiter trusts its watch before it reads its
	// predecessor again (dlock.Config.PushFallback, doubling up to 30s).
	recheck time.Duration
	// now is the host's clock, which records' ages are counted on (see
	// record.go); tests skew it.
	now func() time.Time
}

var (
	_ driver.Backend       = (*backend)(nil)
	_ driver.Blocker       = (*backend)(nil)
	_ driver.DeadlineBound = (*backend)(nil)
	_ driver.CancelBound   = (*backend)(nil)
	_ dlock.Inspector      = (*backend)(nil)
	_ dlock.Identifier     = (*backend)(nil)
	_ driver.PayloadKeeper = (*backend)(nil)
)

// escape makes s one path segment: '/' and '%' (and little else) are
// escaped, so no name's prefix holds another name's keys.
func escape(s string) string { return url.PathEscape(s) }

// prefix is where name's waiters' keys live, ending in '/'.
func (b *backend) prefix(name string) string { return b.root + "/lock/" + escape(name) + "/" }

// key is owner's key for name.
func (b *backend) key(name, owner string) string { return b.prefix(name) + escape(owner) }

// Identity implements dlock.Identifier.
func (b *backend) Identity() string { return "etcd:" + b.root }

// DBSystem implements driver.DBSystem.
func (b *backend) DBSystem() string { return "etcd" }

// BoundsCalls implements driver.DeadlineBound: every call of the etcd
// client is a gRPC call that ends with its ctx, retries included.
func (b *backend) BoundsCalls() bool { return true }

// EndsOnCancel implements driver.CancelBound: a gRPC call ends when its
// ctx is cancelled.
func (b *backend) EndsOnCancel() bool { return true }

// leaseSeconds is ttl in etcd's unit, rounded up: the server's lease
// never ends before the client's deadline.
func leaseSeconds(ttl time.Duration) int64 {
	return int64((ttl + time.Second - 1) / time.Second)
}

// hold is a Grant's Handle: the hold's lease.
type hold struct{ lease clientv3.LeaseID }

// Acquire makes one attempt: it queues, and leaves the queue at once
// unless its key is the oldest.
func (b *backend) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
	e, err := b.enqueue(ctx, r)
	if err != nil {
		return driver.Grant{}, err
	}
	if e.first {
		return e.grant(), nil
	}
	if _, err := b.client.Revoke(ctx, e.lease); err != nil {
		return driver.Grant{}, fmt.Errorf("etcdlock: leaving the queue of %q: %w", r.Name, err)
	}
	return driver.Grant{}, nil
}

// Refresh renews the hold's lease and checks that its key is still the
// one it created.
func (b *backend) Refresh(ctx context.Context, h driver.Hold) error {
	lease, err := b.leaseOf(ctx, h)
	if err != nil {
		return err
	}
	if _, err := b.client.KeepAliveOnce(ctx, lease); err != nil {
		return b.lost(h, err)
	}
	resp, err := b.client.Get(ctx, b.key(h.Name, h.Owner), clientv3.WithKeysOnly())
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 || uint64(resp.Kvs[0].CreateRevision) != h.Token {
		return fmt.Errorf("%w: the key of %q is gone from etcd", dlock.ErrNotHeld, h.Name)
	}
	return nil
}

// Release revokes the hold's lease, which deletes its key and nothing
// else. A hold whose attempt's outcome was unknown (no Handle) is found
// by its owner's key, deleted in the same request (releaseByKey).
func (b *backend) Release(ctx context.Context, h driver.Hold) error {
	hd, ok := h.Handle.(hold)
	if !ok {
		return b.releaseByKey(ctx, h)
	}
	if _, err := b.client.Revoke(ctx, hd.lease); err != nil {
		return b.lost(h, err)
	}
	return nil
}

// releaseByKey releases the hold of an attempt whose outcome was unknown
// (or, with h.Token, the hold of that token): its owner's key is deleted
// by the request that finds it, so the name is
// free one round trip after the attempt was given up, and then the key's
// lease is revoked, so that a put of the attempt still in flight fails.
func (b *backend) releaseByKey(ctx context.Context, h driver.Hold) error {
	key := b.key(h.Name, h.Owner)
	mine := clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
	if h.Token != 0 {
		mine = clientv3.Compare(clientv3.CreateRevision(key), "=", int64(h.Token)) // that hold, not a newer one
	}
	resp, err := b.client.Txn(ctx).
		If(mine).
		Then(clientv3.OpGet(key, clientv3.WithKeysOnly()), clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %q has no key of %q in etcd", dlock.ErrNotHeld, h.Name, h.Owner)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 || kvs[0].Lease == 0 {
		return nil
	}
	if _, err := b.client.Revoke(ctx, clientv3.LeaseID(kvs[0].Lease)); err != nil && !isLeaseNotFound(err) {
		return fmt.Errorf("etcdlock: %q released, its lease not yet revoked: %w", h.Name, err)
	}
	return nil
}

// leaseOf is h's lease: from its Handle, or from its key when it has none
// (an attempt whose outcome was unknown). No key: ErrNotHeld.
func (b *backend) leaseOf(ctx context.Context, h driver.Hold) (clientv3.LeaseID, error) {
	if hd, ok := h.Handle.(hold); ok {
		return hd.lease, nil
	}
	resp, err := b.client.Get(ctx, b.key(h.Name, h.Owner))
	if err != nil {
		return 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("%w: %q has no key of %q in etcd", dlock.ErrNotHeld, h.Name, h.Owner)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease), nil
}

// lost is the error of a lease call on h: ErrNotHeld when the lease is
// gone from the server.
func (b *backend) lost(h driver.Hold, err error) error {
	if isLeaseNotFound(err) {
		return fmt.Errorf("%w: the lease of %q expired on the etcd server", dlock.ErrNotHeld, h.Name)
	}
	return err
}

// List implements dlock.Lister: for each name under prefix, the oldest
// of its keys, in name order, and how many keys wait behind it. etcd
// keeps no time of a key's creation, so a holder's Age is 0.
func (b *backend) List(ctx context.Context, prefix string, limit int) ([]dlock.Held, error) {
	resp, err := b.client.Get(ctx, b.root+"/lock/"+escape(prefix), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	oldest := map[string]*mvccpb.KeyValue{}
	keys := map[string]int{}
	var names []string
	for _, kv := range resp.Kvs {
		esc, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), b.root+"/lock/"), "/")
		if !ok {
			continue
		}
		name, err := url.PathUnescape(esc)
		if err != nil || !strings.HasPrefix(name, prefix) {
			continue
		}
		keys[name]++
		if cur, ok := oldest[name]; !ok {
			names = append(names, name)
			oldest[name] = kv
		} else if kv.CreateRevision < cur.CreateRevision {
			oldest[name] = kv
		}
	}
	slices.Sort(names)
	var held []dlock.Held
	for _, name := range names[:min(len(names), limit)] {
		kv := oldest[name]
		ttl, err := b.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
		if err != nil {
			return nil, err
		}
		if ttl.TTL > 0 {
			h := holderOf(kv)
			h.TTL = time.Duration(ttl.TTL) * time.Second
			held = append(held, dlock.Held{Name: name, Holder: h, Waiters: keys[name] - 1})
		}
	}
	return held, nil
}

// ForceRelease implements dlock.ForceReleaser: it deletes the holder's
// key, if it is still the one read; the next waiter, which watches it, is
// granted at once, and the holder's next renewal finds its key gone.
func (b *backend) ForceRelease(ctx context.Context, name string) (dlock.Holder, bool, error) {
	for {
		resp, err := b.client.Get(ctx, b.prefix(name), clientv3.WithFirstCreate()...)
		if err != nil || len(resp.Kvs) == 0 {
			return dlock.Holder{}, false, err
		}
		kv := resp.Kvs[0]
		del, err := b.client.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
			Then(clientv3.OpDelete(string(kv.Key))).Commit()
		if err != nil {
			return dlock.Holder{}, false, err
		}
		if del.Succeeded {
			return holderOf(kv), true, nil
		}
	}
}

// value is what a hold's key holds: its owner id and, after a newline,
// its payload (neither can contain one).
func value(r driver.Request) string {
	if r.Payload == "" {
		return r.Owner
	}
	return r.Owner + "\n" + r.Payload
}

// holderOf is the holder whose key is kv, without its TTL.
func holderOf(kv *mvccpb.KeyValue) dlock.Holder {
	owner, payload, _ := strings.Cut(string(kv.Value), "\n")
	return dlock.Holder{Owner: owner, Payload: payload, Token: uint64(kv.CreateRevision)}
}

// KeepsPayload implements driver.PayloadKeeper: the payload is in the
// hold's key, after its owner id.
func (*backend) KeepsPayload() bool { return true }

// Inspect reports the holder: the oldest key under the name's prefix.
func (b *backend) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	resp, err := b.client.Get(ctx, b.prefix(name), clientv3.WithFirstCreate()...)
	if err != nil {
		return dlock.Holder{}, false, err
	}
	if len(resp.Kvs) == 0 {
		return dlock.Holder{}, false, nil
	}
	kv := resp.Kvs[0]
	h := holderOf(kv)
	ttl, err := b.client.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		return dlock.Holder{}, false, err
	}
	if ttl.TTL <= 0 {
		return dlock.Holder{}, false, nil // expired between the two reads
	}
	h.TTL = time.Duration(ttl.TTL) * time.Second
	return h, true, nil
}
