// Package zklock is dlock on ZooKeeper: the ephemeral-sequential lock
// recipe (Curator's InterProcessMutex) with a context on every wait.
//
// Each Lock creates a protected ephemeral sequential node under the
// name's directory; the holder is the node with the lowest sequence, and
// every waiter watches only the node just before its own, so a release
// wakes one waiter (no herd). A node whose create reply was lost is found
// again by its GUID, or deleted once the connection is back, so no orphan
// blocks the queue. Cancelling a waiting Lock deletes its node.
// go-zookeeper can lose a watch when it reconnects to another server (it
// does not say when re-registering one fails), so a waiter also looks at
// the node it waits for after dlock.Config.PushFallback, then at doubling
// intervals up to 30s: one request each, and a lost watch costs at most
// that wait.
//
// The fencing token is the lock node's Czxid: zxids increase across the
// whole ensemble, so tokens increase across holders.
//
// Each node is made in a multi request that also writes the directory
// (empty data, any version): the reply carries the directory's stat as
// that transaction left it, which tells whether the new node is the only
// one (so holds at once) and, as its Mzxid, the node's Czxid. A lock taken
// at once thus waits for one request, where the recipe reads the queue
// after the create; the read of the node that watches it for the lease
// goes on behind Lock's return, and a lock and unlock cost three requests
// in all, as the recipe does. Where the directory's ACL lets a client
// create nodes but not write the directory (dlock makes directories with
// the Locker's ACL, see WithACL), its nodes are made by plain creates and
// each reads the queue. Clients that watch a lock directory's data see it
// change at every acquire.
//
// Goroutines sharing a Locker queue in the process, and a hold that ends
// while another of them waits hands the lock on (dlock.WithHandOffs) in
// one multi request, one write: it deletes the holder's node and creates
// the next holder's at the end of the queue. With no other process
// queued, the new node holds at once, and its Czxid is the next token,
// both told by the reply.
// With one queued, that one holds, as after any release: the queue stays
// first come, first served across processes.
//
// Leases end with the session. The watchdog checks every TTL/3 that the
// session is the one that created the node and the node still exists; if
// the session expired, Done closes with an error wrapping ErrSessionExpired.
// If the check cannot be made for a whole TTL (disconnected), Done closes
// too: the session may have expired on the server by then and another
// owner may hold the lock. Set dlock.WithTTL no longer than the session
// timeout the server granted, so the client gives up before the server
// can expire the session; the default TTL of 30s suits a session timeout
// of 30s or more.
//
// A go-zookeeper v1.0.4 connection can stop for good after a reconnect
// whose first write fails (a server that drops the connection just after
// the handshake, as a follower does when it loses its leader): its loop
// blocks (go-zookeeper/zk pull request 163) and its state stays
// StateDisconnected. dlock's calls still return with their contexts and
// holders' Done close at their deadlines; replace a *zk.Conn that stays
// disconnected for longer than its session timeout.
//
// Failover. ZooKeeper commits every write on a quorum of the ensemble
// before it answers, so a new leader has every lock node a holder was
// told it has: a member or leader lost leaves locks and tokens as they
// were (the fault suite kills followers, leaders and a quorum). With the
// quorum lost, nothing is granted, and holders lose their leases at their
// deadlines, before the sessions can expire.
//
// NewReadWrite (Curator's InterProcessReadWriteLock) and NewSemaphore
// (InterProcessSemaphoreV2) use the same queue, each waiter still woken
// only by the node it waits for.
//
// Java clients: a Locker's lock of name and Curator's InterProcessMutex
// (or LeaderSelector) on root/name exclude each other both ways, being
// the same recipe. NewReadWrite and NewSemaphore keep nodes of their own
// layout and do not see Curator's read-write lock or semaphore:
// docs/deployments.md says why and what to use.
package zklock

import (
	"context"
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// ErrSessionExpired is wrapped by a lease's Err when the ZooKeeper session
// that held it expired (its ephemeral node, and the lock, are gone).
var ErrSessionExpired = errors.New("zklock: session expired")

// Locker is a ZooKeeper lock client, safe for concurrent use by every
// goroutine of a process. Lockers may share one *zk.Conn.
type Locker struct {
	*dlock.Client
	b *backend
}

var (
	_ dlock.Locker    = (*Locker)(nil)
	_ dlock.Inspector = (*Locker)(nil)
)

// New returns a Locker whose locks live under root (for example
// "/dlock"), created as needed. It does no I/O; conn stays the caller's,
// with its authentication. Options: dlock's, and WithACL for the ACL of
// the nodes it creates (default zk.WorldACL(zk.PermAll)).
func New(conn *zk.Conn, root string, opts ...dlock.Option) (*Locker, error) {
	if conn == nil {
		return nil, errors.New("zklock: nil *zk.Conn")
	}
	if err := validRoot(root); err != nil {
		return nil, err
	}
	return newLocker(conn, root, mutex{}, "", opts...)
}

func newLocker(conn *zk.Conn, root string, o order, suffix string, opts ...dlock.Option) (*Locker, error) {
	b := newBackend(conn, root, o, suffix)
	var backend driver.Backend = b
	if _, ok := o.(mutex); ok { // a mutex's hold can be handed on
		backend = handing{b}
	}
	c, err := dlock.NewClient(backend, opts...)
	if err != nil {
		return nil, err
	}
	b.patience, b.recheck = c.Config().TTL, c.Config().PushFallback
	if b.acl, err = aclOf(c.Config()); err != nil {
		return nil, err
	}
	return &Locker{Client: c, b: b}, nil
}

// aclKey is the key of WithACL's setting.
type aclKey struct{}

// WithACL sets the ACL of the nodes a Locker, ReadWrite or Semaphore
// creates (default zk.WorldACL(zk.PermAll)); the connection must carry
// the authentication the ACL asks for (conn.AddAuth).
func WithACL(acl []zk.ACL) dlock.Option { return dlock.WithSetting(aclKey{}, acl) }

// aclOf reads WithACL from cfg.
func aclOf(cfg dlock.Config) ([]zk.ACL, error) {
	v, ok := cfg.Setting(aclKey{})
	if !ok {
		return zk.WorldACL(zk.PermAll), nil
	}
	acl, _ := v.([]zk.ACL)
	if len(acl) == 0 {
		return nil, errors.New("zklock: WithACL with an empty ACL: nobody could delete the nodes")
	}
	return acl, nil
}

// Close ends every lease of l and deletes their nodes (see
// dlock.Client.Close). It does not close the connection.
func (l *Locker) Close(ctx context.Context) error {
	err := l.Client.Close(ctx)
	l.b.closeOnce.Do(func() { close(l.b.closed) })
	return err
}
