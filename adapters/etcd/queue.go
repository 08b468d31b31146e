package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// entry is a waiter's place in a name's queue: its key's lease and create
// revision, and whether the key is the oldest (the holder).
type entry struct {
	key   string
	lease clientv3.LeaseID
	rev   int64
	first bool
}

func (e entry) grant() driver.Grant {
	return driver.Grant{Acquired: true, Token: uint64(e.rev), Handle: hold{e.lease}}
}

// enqueue puts r's key, with a new lease, unless an earlier attempt of the
// same hold (whose reply was lost) put it already: then that key and its
// lease are the hold's, and the new lease is revoked. One transaction
// puts the key and reads the oldest key of the name.
func (b *backend) enqueue(ctx context.Context, r driver.Request) (entry, error) {
	lease, err := b.client.Grant(ctx, leaseSeconds(r.TTL))
	if err != nil {
		return entry{}, err
	}
	key, prefix := b.key(r.Name, r.Owner), b.prefix(r.Name)
	reads := []clientv3.Op{clientv3.OpGet(key), clientv3.OpGet(prefix, clientv3.WithFirstCreate()...)}
	resp, err := b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(append([]clientv3.Op{clientv3.OpPut(key, value(r), clientv3.WithLease(lease.ID))}, reads...)...).
		Else(reads...).
		Commit()
	if err != nil {
		return entry{}, err // the hold is released by its owner's key (see Release)
	}
	ops := resp.Responses
	if resp.Succeeded {
		ops = ops[1:]
	} else if _, err := b.client.Revoke(ctx, lease.ID); err != nil && !isLeaseNotFound(err) {
		return entry{}, err
	}
	mine, oldest := ops[0].GetResponseRange().Kvs, ops[1].GetResponseRange().Kvs
	if len(mine) == 0 || len(oldest) == 0 {
		return entry{}, fmt.Errorf("%w: the key of %q expired as it was put", dlock.ErrNotHeld, r.Name)
	}
	e := entry{key: key, lease: clientv3.LeaseID(mine[0].Lease), rev: mine[0].CreateRevision}
	e.first = oldest[0].CreateRevision == e.rev
	return e, nil
}

// AcquireWait implements driver.Blocker: it queues, and waits until its
// key is the oldest or ctx ends. On error the Client releases the hold by
// its owner's key, which revokes the lease and deletes the key.
func (b *backend) AcquireWait(ctx context.Context, r driver.Request) (driver.Grant, error) {
	sent := time.Now()
	e, err := b.enqueue(ctx, r)
	if err != nil {
		return driver.Grant{}, err
	}
	if !e.first {
		w := waiter{b: b, r: r, e: e, recheck: b.recheck, renewed: sent}
		if err := w.wait(ctx); err != nil {
			w.leave(ctx)
			return driver.Grant{}, err
		}
		// The lease counts from its last keep-alive, a third of the TTL
		// ago at most: no renewal is needed to date the grant.
		g := e.grant()
		g.Since = w.renewed
		return g, nil
	}
	return e.grant(), nil
}

// waiter is one waiting attempt: it watches the key just older than its
// own until that one is deleted, and keeps its own lease alive meanwhile.
type waiter struct {
	b       *backend
	r       driver.Request
	e       entry
	recheck time.Duration // how long a watch is trusted before a read
	renewed time.Time     // when the last keep-alive that succeeded was sent
}

// wait returns nil once w's key is the oldest of its name.
func (w *waiter) wait(ctx context.Context) error {
	for {
		pred, rev, err := w.predecessor(ctx)
		if err != nil {
			return err
		}
		if pred == "" {
			return nil
		}
		broke, err := w.watch(ctx, pred, rev)
		if err != nil {
			return err
		}
		if broke { // no leader, say: pause before the next read
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(brokenWatchPause):
			}
		}
	}
}

// predecessor is the key created just before w's, or "" when w's is the
// oldest, and the revision read at. It is read in a transaction whose
// compare is w's own key, as created, on w's own lease: "" (the grant)
// is only ever the answer while w's place exists, so a waiter whose key
// was deleted or whose lease was revoked, in the same request as the key
// ahead of it or just before, is never granted (an error wrapping
// dlock.ErrLost and dlock.ErrNotHeld says so), and a queue deleted at
// once grants nobody.
func (w *waiter) predecessor(ctx context.Context) (string, int64, error) {
	resp, err := w.b.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(w.e.key), "=", w.e.rev),
			clientv3.Compare(clientv3.LeaseValue(w.e.key), "=", w.e.lease)).
		Then(clientv3.OpGet(w.b.prefix(w.r.Name),
			append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(w.e.rev-1), clientv3.WithKeysOnly())...)).
		Commit()
	if err != nil {
		return "", 0, err
	}
	if !resp.Succeeded {
		return "", 0, fmt.Errorf("%w: %w: the waiter's key of %q, or its lease, is gone from etcd", dlock.ErrLost, dlock.ErrNotHeld, w.r.Name)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return "", resp.Header.Revision, nil
	}
	return string(kvs[0].Key), resp.Header.Revision, nil
}

// leave revokes the lease of a waiter that gives up, and with it its key,
// within half of dlock.CancelMargin, so Lock returns with its place gone;
// the Client's clean-up of the hold tries again when this fails.
func (w *waiter) leave(ctx context.Context) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dlock.CancelMargin/2)
	defer cancel()
	_, _ = w.b.client.Revoke(lctx, w.e.lease)
}

// brokenWatchPause is how long a waiter whose watch broke waits before it
// reads its predecessor again.
const brokenWatchPause = 50 * time.Millisecond

// watch returns when pred is deleted after rev, when the watch cannot be
// trusted any longer (recheck, doubling up to 30s), or when it broke
// (broke: a member that lost its leader ends its watches), and with an
// error when ctx ends or w's own lease or key is gone. Its lease is kept
// alive every third of the TTL meanwhile.
func (w *waiter) watch(ctx context.Context, pred string, rev int64) (broke bool, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	preds := w.b.client.Watch(wctx, pred, clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	mine := w.b.client.Watch(wctx, w.e.key, clientv3.WithRev(rev+1), clientv3.WithFilterPut())
	recheck := time.NewTimer(w.recheck)
	defer recheck.Stop()
	renew := time.NewTicker(max(w.r.TTL/3, time.Millisecond))
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case resp, ok := <-preds:
			if !ok || resp.Err() != nil {
				return true, nil
			}
			if deleted(resp) {
				return false, nil
			}
		case resp, ok := <-mine:
			if !ok || resp.Err() != nil {
				return true, nil
			}
			if deleted(resp) {
				return false, fmt.Errorf("%w: %w: the waiter's key of %q was deleted from etcd", dlock.ErrLost, dlock.ErrNotHeld, w.r.Name)
			}
		case <-renew.C:
			if err := w.renew(ctx); err != nil {
				return false, err
			}
		case <-recheck.C:
			w.recheck = min(2*w.recheck, 30*time.Second)
			return false, nil
		}
	}
}

// renew keeps w's lease alive, each try bounded by a third of the TTL. A
// lease not renewed for a whole TTL may have expired on the server, and
// the wait fails then: the waiter's place may be gone.
func (w *waiter) renew(ctx context.Context) error {
	kctx, cancel := context.WithTimeout(ctx, max(w.r.TTL/3, time.Millisecond))
	defer cancel()
	sent := time.Now()
	_, err := w.b.client.KeepAliveOnce(kctx, w.e.lease)
	switch {
	case err == nil:
		w.renewed = sent
	case isLeaseNotFound(err):
		return fmt.Errorf("%w: %w: the waiter's lease of %q is gone from the etcd server", dlock.ErrLost, dlock.ErrNotHeld, w.r.Name)
	case ctx.Err() != nil:
		return ctx.Err()
	case time.Since(w.renewed) >= w.r.TTL:
		return fmt.Errorf("etcdlock: the waiter's lease of %q was not renewed for a TTL (%v): %w", w.r.Name, w.r.TTL, err)
	}
	return nil
}

// deleted reports whether resp holds a delete.
func deleted(resp clientv3.WatchResponse) bool {
	for _, ev := range resp.Events {
		if ev.Type == mvccpb.DELETE {
			return true
		}
	}
	return false
}

// isLeaseNotFound reports whether err says a lease is gone from the
// server.
func isLeaseNotFound(err error) bool {
	return errors.Is(err, rpctypes.ErrLeaseNotFound) || rpctypes.ErrorDesc(err) == rpctypes.ErrGRPCLeaseNotFound.Error()
}
