// The hand-off between call chains of one Locker: the holder's node and
// the next holder's, swapped in one write.

package zklock

import (
	"context"
	"errors"
	"path"
	"slices"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock/driver"
)

// handing is New's backend: backend, and a hold can pass straight to the
// next call chain of the same Locker (driver.Transferer, see
// dlock.WithHandOffs). The read-write lock and the semaphore have no such
// hand-off.
type handing struct{ *backend }

var _ driver.Transferer = handing{}

// Transfer ends h and queues r.Owner in one multi request: it deletes h's
// node and creates r.Owner's at the end of the queue, in one transaction
// (one write where a release and an acquire make two). The token rule
// stays as it is, the holding node's Czxid: when no other node was
// queued, the new node is first, holds at once, and its Czxid is larger
// than every token before it. When another process's node was queued
// behind h's, that node holds now, as after any release, and its token
// is larger than h's; the new node, queued behind it, is deleted again,
// and Transfer reports nothing granted. h is then already released:
// Release, which Client calls next, has nothing left to do.
func (b handing) Transfer(ctx context.Context, h driver.Hold, r driver.Request) (driver.Grant, error) {
	n, ok := h.Handle.(holdNode)
	session := b.conn.SessionID()
	if !ok || r.Name != h.Name || n.session != session {
		return driver.Grant{}, nil // Client's release tells what became of h
	}
	dir := b.dir(r.Name)
	prefix := protectedPrefix(b.tag(nil, r.Owner))
	// Multi is called as create calls Create: not under ctx, so that it
	// cannot go on unseen after Transfer returned. The write to dir, as
	// makeNode's, tells whether the new node is the only one, and its
	// Czxid.
	ops := []any{
		&zk.DeleteRequest{Path: n.path, Version: -1},
		&zk.CreateRequest{Path: dir + "/" + prefix, Data: []byte(nodeData(r)), Acl: b.acl, Flags: zk.FlagEphemeralSequential},
	}
	if !b.plainCreate.Load() {
		ops = append(ops, &zk.SetDataRequest{Path: dir, Version: -1})
	}
	res, err := b.conn.Multi(ops...)
	switch {
	case err == nil && len(res) == len(ops):
	case failedWhole(err):
		return driver.Grant{}, nil
	default:
		// Unknown outcome: the new node, if made, is deleted once the
		// connection is back; Client releases h.
		b.forget(dir, prefix, "", session)
		if err == nil {
			err = errors.New("zklock: hand-off: a multi request answered with no result")
		}
		return driver.Grant{}, err
	}
	return b.queued(ctx, n, r, res[1].String, res, session)
}

// queued finishes a hand-off whose multi request made node: it holds
// when it is first in the queue (the only node, as the write to the
// directory tells, or found so by reading the queue); otherwise another
// process's node holds, and node is deleted again.
func (b handing) queued(ctx context.Context, n holdNode, r driver.Request, node string, res []zk.MultiResponse, session int64) (driver.Grant, error) {
	dir := b.dir(r.Name)
	if len(res) == 3 && res[2].Stat != nil && res[2].Stat.NumChildren == 1 {
		// The only node: it holds, with its Czxid as the token.
		tokenOf := b.watched(context.WithoutCancel(ctx), node, session)
		return driver.Grant{Acquired: true, Token: uint64(res[2].Stat.Mzxid), Handle: holdNode{node, session}, Lost: b.lostWhenGone(tokenOf, node, session)}, nil
	}
	tokenOf := b.watched(ctx, node, session)
	q, err := b.queue(dir)
	token, _, terr := tokenOf()
	if i := slices.Index(q, path.Base(node)); err == nil && terr == nil && i >= 0 && b.blocker(q, i, r.Owner) == "" {
		return driver.Grant{Acquired: true, Token: token, Handle: holdNode{node, session}, Lost: b.lostWhenGone(tokenOf, node, session)}, nil
	}
	// Another process was queued and holds now (or the queue could not
	// be read): r.Owner holds nothing.
	b.remove(dir, node, session)
	b.released.Store(n.path, struct{}{})
	return driver.Grant{}, nil
}

// failedWhole reports whether a multi request failed as a whole, changing
// nothing: ZooKeeper applies all of its operations or none, and answers
// with the first one's error. h's node gone (with its session, or deleted
// from outside) or a missing permission is such an error. A connection
// error, or any other, leaves the outcome unknown.
func failedWhole(err error) bool {
	for _, e := range []error{zk.ErrNoNode, zk.ErrNoAuth, zk.ErrInvalidACL, zk.ErrBadArguments, zk.ErrSessionExpired} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
