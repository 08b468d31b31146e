// Package zklock is dlock on ZooKeeper: the ephemeral-sequential lock
// recipe (Curator's InterProcessMutex) with a context on every wait.
//
// Each Lock creates a protected ephemeral sequential node under the
// name's directory; the holder is the node with the lowest sequence, and
// every waiter watches only the node just before its own, so a release
// wakes one waiter (no herd). A node whose create reply was lost is found
// again by its GUID, or deleted once the connection is back, so no orphan
// blocks the queue. Cancelling a waiting Lock deletes its node.
//
// The fencing token is the lock node's Czxid: zxids increase across the
// whole ensemble, so tokens increase across holders.
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
// NewReadWrite (Curator's InterProcessReadWriteLock) and NewSemaphore
// (InterProcessSemaphoreV2) use the same queue, each waiter still woken
// only by the node it waits for.
package zklock

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errjoin"
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
// with its ACLs and authentication (nodes are created with
// zk.WorldACL(zk.PermAll) unless WithACL says otherwise).
func New(conn *zk.Conn, root string, opts ...dlock.Option) (*Locker, error) {
	if conn == nil {
		return nil, errors.New("zklock: nil *zk.Conn")
	}
	if err := validRoot(root); err != nil {
		return nil, err
	}
	return newLocker(conn, root, "lock", "", opts...)
}

func newLocker(conn *zk.Conn, root, kind, suffix string, opts ...dlock.Option) (*Locker, error) {
	b := newBackend(conn, root, kind, suffix)
	c, err := dlock.NewClient(b, opts...)
	if err != nil {
		return nil, err
	}
	b.patience = c.Config().TTL
	return &Locker{Client: c, b: b}, nil
}

func newBackend(conn *zk.Conn, root, kind, suffix string) *backend {
	return &backend{conn: conn, root: root, acl: zk.WorldACL(zk.PermAll), closed: make(chan struct{}), kind: kind, suffix: suffix}
}

// WithACL sets the ACL of the nodes l creates. Call it before first use.
func (l *Locker) WithACL(acl []zk.ACL) *Locker {
	l.b.acl = acl
	return l
}

// Close ends every lease of l and deletes their nodes (see
// dlock.Client.Close). It does not close the connection.
func (l *Locker) Close(ctx context.Context) error {
	err := l.Client.Close(ctx)
	l.b.closeOnce.Do(func() { close(l.b.closed) })
	return err
}

// systemTree is ZooKeeper's own tree (quotas, configuration).
const systemTree = "/zookeeper"

func validRoot(root string) error {
	if !strings.HasPrefix(root, "/") || (len(root) > 1 && strings.HasSuffix(root, "/")) || path.Clean(root) != root ||
		strings.ContainsRune(root, 0) {
		return fmt.Errorf("zklock: invalid root path %q: want an absolute, clean path such as /dlock", root)
	}
	if root == systemTree || strings.HasPrefix(root, systemTree+"/") {
		return fmt.Errorf("zklock: invalid root path %q: %s is ZooKeeper's own tree", root, systemTree)
	}
	return nil
}

// Identity implements dlock.Identifier: the kind of lock and its root.
func (b *backend) Identity() string { return "zk-" + b.kind + ":" + b.root + b.suffix }

// CheckName implements dlock.NameChecker: under root "/", a name whose
// node would be ZooKeeper's own /zookeeper is refused.
func (b *backend) CheckName(name string) error {
	if b.dir(name) == systemTree {
		return fmt.Errorf("%w: %q under root / is ZooKeeper's own %s; use another root, such as /dlock", dlock.ErrInvalidName, name, systemTree)
	}
	return nil
}

// escape turns a lock name into one node name: bytes other than
// [A-Za-z0-9_-] become %XX, so '/', '.', '..', control and reserved
// characters cannot reach the path, and distinct names stay distinct.
func escape(name string) string {
	const hexdigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexdigits[c>>4])
		b.WriteByte(hexdigits[c&15])
	}
	return b.String()
}

// nodePrefix marks a protected node: "_c_" GUID "-lock-" then the sequence.
const nodePrefix = "_c_"

type backend struct {
	conn      *zk.Conn
	root      string
	acl       []zk.ACL
	closed    chan struct{}
	closeOnce sync.Once
	// kind is "lock" (a mutex), "read" or "write" (a read-write lock);
	// suffix keeps each kind's directory apart (escape never writes '.').
	kind, suffix string
	// patience is how long a call retries while ZooKeeper is unreachable:
	// the lease TTL.
	patience time.Duration
}

var (
	_ dlock.Backend      = (*backend)(nil)
	_ dlock.Blocker      = (*backend)(nil)
	_ dlock.Inspector    = (*backend)(nil)
	_ dlock.SessionBound = (*backend)(nil)
)

// HoldsEndWithSession implements dlock.SessionBound: a lock node lives
// until it is deleted or its session ends.
func (*backend) HoldsEndWithSession() bool { return true }

// holdNode is a hold's Handle.
type holdNode struct {
	path    string
	session int64
}

func (b *backend) dir(name string) string {
	if b.root == "/" {
		return "/" + escape(name) + b.suffix
	}
	return b.root + "/" + escape(name) + b.suffix
}

// ownerTag is a short hash of an owner id, in read-write node names, so a
// reader can see which write node is its own owner's (a downgrade).
func ownerTag(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:8])
}

// tag is what follows the protected GUID in this hold's node name: the
// kind, and for read-write nodes the owner's tag, so a reader can tell its
// own owner's write node. The server appends the sequence.
//
// A reader whose owner holds the write lock (the first node of q) reads at
// once, ahead of other owners' queued writers, or it and they would wait
// for each other (a downgrade): its node is marked as such, and every
// writer waits for a marked node wherever it stands in the queue.
func (b *backend) tag(q []string, owner string) string {
	switch {
	case b.kind == "lock":
		return "lock"
	case b.kind == "read" && ownsWrite(q, owner):
		return "read-" + ownerTag(owner) + downgradeMark
	}
	return b.kind + "-" + ownerTag(owner)
}

// downgradeMark ends the tag of a reader's node taken under its owner's
// write lock.
const downgradeMark = "-g"

func isDowngrade(node string) bool {
	return strings.Contains(node, "-read-") && strings.Contains(node, downgradeMark+"-")
}

// ownsWrite reports whether owner holds the write lock in queue q.
func ownsWrite(q []string, owner string) bool {
	return len(q) > 0 && strings.Contains(q[0], "-write-"+ownerTag(owner)+"-")
}

// requeue is what blocker returns for a downgrade node whose owner no
// longer held the write lock when it was made: it joins the queue again as
// a plain reader.
const requeue = "\x00requeue"

// blocker returns the node of q that node i must wait for, or "" when it
// may hold now. A mutex waits for its predecessor; a writer too, and then
// for any downgrade reader; a reader waits only for the nearest writer
// before it that is not its own owner's.
func (b *backend) blocker(q []string, i int, owner string) string {
	if b.kind != "read" {
		if i > 0 {
			return q[i-1]
		}
		if b.kind == "write" {
			if j := slices.IndexFunc(q, isDowngrade); j >= 0 {
				return q[j]
			}
		}
		return ""
	}
	if isDowngrade(q[i]) {
		if ownsWrite(q, owner) {
			return ""
		}
		return requeue
	}
	mine := "-write-" + ownerTag(owner) + "-"
	for j := i - 1; j >= 0; j-- {
		if strings.Contains(q[j], "-write-") && !strings.Contains(q[j], mine) {
			return q[j]
		}
	}
	return ""
}

// ensureDir creates root (persistent) and the lock's directory (a
// container, which the server removes once empty).
func (b *backend) ensureDir(dir string) error {
	parts := strings.Split(strings.TrimPrefix(b.root, "/"), "/")
	p := ""
	for _, part := range parts {
		if part == "" {
			continue
		}
		p += "/" + part
		if _, err := b.conn.Create(p, nil, zk.FlagPersistent, b.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	if _, err := b.conn.CreateContainer(dir, nil, zk.FlagContainer, b.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	return nil
}

// sequence is a lock node's sequence suffix (ten digits, zero-padded, so
// it sorts as a string).
func sequence(node string) string {
	if len(node) < 10 {
		return node
	}
	return node[len(node)-10:]
}

// queue returns dir's lock nodes in sequence order.
func (b *backend) queue(dir string) ([]string, error) {
	children, _, err := b.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(children, func(x, y string) int { return strings.Compare(sequence(x), sequence(y)) })
	return children, nil
}

// create makes this hold's protected ephemeral sequential node and returns
// its path and its Czxid (read in the background: the caller's next request
// overlaps it; token waits for it). After a connection loss mid-create it waits for the
// connection (while the session lives and ctx allows) and looks for the
// node by its GUID. If it cannot tell, a background search deletes the
// node once the connection is back (or the session ends, taking it along).
func (b *backend) create(ctx context.Context, dir, owner, tag string) (string, func() (uint64, <-chan zk.Event, error), error) {
	var g [16]byte
	_, _ = rand.Read(g[:])
	prefix := nodePrefix + hex.EncodeToString(g[:]) + "-" + tag + "-"
	session := b.conn.SessionID()
	maybeCreated := false
	var cut time.Time // since when the connection has failed
	fail := func(err error) (string, func() (uint64, <-chan zk.Event, error), error) {
		if maybeCreated {
			b.forget(dir, prefix, session)
		}
		return "", nil, err
	}
	for {
		var p string
		var err error
		if maybeCreated {
			var found bool
			if p, found, err = b.find(dir, prefix); err == nil && !found {
				maybeCreated = false
				continue
			}
		} else {
			p, err = b.conn.Create(dir+"/"+prefix, []byte(owner), zk.FlagEphemeralSequential, b.acl)
		}
		switch {
		case err == nil:
			czxid := make(chan error, 1)
			var (
				st  *zk.Stat
				own <-chan zk.Event
			)
			go func() {
				czxid <- b.retry(ctx, session, func() (err error) {
					_, st, own, err = b.conn.ExistsW(p)
					return err
				})
			}()
			// token also returns a watch on the node: it fires if the node
			// goes (deleted from outside, or with the session).
			var (
				read  sync.Once
				token uint64
				terr  error
			)
			tokenOf := func() (uint64, <-chan zk.Event, error) {
				read.Do(func() {
					if terr = <-czxid; terr == nil {
						token = uint64(st.Czxid)
					}
				})
				return token, own, terr
			}
			return p, tokenOf, nil
		case errors.Is(err, zk.ErrNoNode) && !maybeCreated:
			if err := b.ensureDir(dir); err != nil {
				return fail(err)
			}
		case errors.Is(err, zk.ErrSessionExpired):
			// The node, if made, died with the session.
			session, maybeCreated = b.conn.SessionID(), false
		case errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer):
			maybeCreated = true
			if b.conn.SessionID() != session {
				maybeCreated = false
				session = b.conn.SessionID()
			}
			if cut.IsZero() {
				cut = time.Now()
			}
			if gone := b.unreachable(cut, err); gone != nil {
				return fail(gone)
			}
			select {
			case <-ctx.Done():
				return fail(errjoin.Join(ctx.Err(), err))
			case <-time.After(50 * time.Millisecond):
			}
		default:
			return fail(err)
		}
	}
}

// retry runs f until it returns something other than a connection error,
// while the session lives and ctx allows: a reconnect to another server
// keeps the session, its nodes and their places in the queue.
func (b *backend) retry(ctx context.Context, session int64, f func() error) error {
	var cut time.Time
	for {
		err := f()
		if !errors.Is(err, zk.ErrConnectionClosed) && !errors.Is(err, zk.ErrNoServer) || b.conn.SessionID() != session {
			return err
		}
		if cut.IsZero() {
			cut = time.Now()
		}
		if gone := b.unreachable(cut, err); gone != nil {
			return gone
		}
		select {
		case <-ctx.Done():
			return errjoin.Join(ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lostWhenGone turns the watch on a held node into dlock.Grant.Lost: the
// lease ends as soon as the node is deleted (from outside, or by Unlock,
// when the lease has already ended) or its session expires, not at the
// next renewal. A watch that fires for a disconnection alone is no loss
// (the session, and the node, may live on; renewal will tell); the
// watchdog then checks as usual.
func lostWhenGone(own <-chan zk.Event, node string) <-chan error {
	lost := make(chan error, 1)
	go func() {
		ev, ok := <-own
		switch {
		case !ok:
		case ev.Type == zk.EventNodeDeleted:
			lost <- fmt.Errorf("%w: node %s was deleted", dlock.ErrNotHeld, node)
		case ev.State == zk.StateExpired || errors.Is(ev.Err, zk.ErrSessionExpired):
			lost <- fmt.Errorf("%w: %w: node %s went with it", dlock.ErrNotHeld, ErrSessionExpired, node)
		}
	}()
	return lost
}

// ErrConnClosed is returned by every call of a Locker whose *zk.Conn its
// owner has closed.
var ErrConnClosed = errors.New("zklock: the *zk.Conn is closed")

// unreachable returns a permanent error when a call that has failed with
// connection errors since cut should not be retried: the connection was
// closed by its owner, or ZooKeeper has been out of reach for longer than
// the lease TTL (the session may have expired, and the caller is better
// told than kept waiting).
func (b *backend) unreachable(cut time.Time, err error) error {
	if b.connClosed() {
		return fmt.Errorf("%w: %w", ErrConnClosed, err)
	}
	if b.patience > 0 && time.Since(cut) > b.patience {
		return fmt.Errorf("zklock: ZooKeeper unreachable for %v, longer than the lease TTL: %w", time.Since(cut).Round(time.Millisecond), err)
	}
	return nil
}

// connClosed reports whether conn was closed by its owner. A closed
// connection stays StateDisconnected; one that broke moves on to
// StateConnecting at once while it reconnects.
func (b *backend) connClosed() bool {
	for range 3 {
		if b.conn.State() != zk.StateDisconnected {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// find looks for the node with prefix in dir.
func (b *backend) find(dir, prefix string) (string, bool, error) {
	children, _, err := b.conn.Children(dir)
	if err != nil {
		return "", false, err
	}
	for _, c := range children {
		if strings.HasPrefix(c, prefix) {
			return dir + "/" + c, true, nil
		}
	}
	return "", false, nil
}

// forget deletes, in the background, a node this client may have created
// but cannot use, retrying until it is gone, its session ended, or the
// Locker closed.
func (b *backend) forget(dir, prefix string, session int64) {
	go func() {
		for {
			if b.conn.SessionID() != session {
				return
			}
			if p, found, err := b.find(dir, prefix); err == nil {
				if !found {
					return
				}
				if err := b.conn.Delete(p, -1); err == nil || errors.Is(err, zk.ErrNoNode) {
					return
				}
			}
			select {
			case <-b.closed:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// remove deletes node, made by session in dir, or has it deleted in the
// background (forget) if the connection is down.
func (b *backend) remove(dir, node string, session int64) {
	if err := b.conn.Delete(node, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		base := path.Base(node)
		b.forget(dir, base[:len(base)-10], session) // the GUID prefix, without the sequence
	}
}

// Acquire makes one attempt: it joins the queue only if it could hold at
// once, and leaves again unless it can.
func (b *backend) Acquire(ctx context.Context, r dlock.Request) (dlock.Grant, error) {
	dir := b.dir(r.Name)
	q, err := b.queue(dir)
	// mine stands for the node this attempt would make, at the end.
	mine := func() []string { return append(q, "-"+b.tag(q, r.Owner)+"-") }
	if err == nil && b.blocker(mine(), len(q), r.Owner) != "" {
		// A follower may not yet have applied a release that another
		// client already saw succeed: sync it with the leader before
		// saying no. (A stale empty queue needs no sync: the create
		// below goes through the leader and the re-read follows it.)
		if _, err = b.conn.Sync(dir); err == nil || errors.Is(err, zk.ErrNoNode) {
			q, err = b.queue(dir)
		}
	}
	if err != nil || b.blocker(mine(), len(q), r.Owner) != "" {
		return dlock.Grant{}, err
	}
	node, tokenOf, err := b.create(ctx, dir, r.Owner, b.tag(q, r.Owner))
	if err != nil {
		return dlock.Grant{}, err
	}
	q, err = b.queue(dir)
	token, own, terr := tokenOf()
	if err == nil {
		err = terr
	}
	if i := slices.Index(q, path.Base(node)); err == nil && i >= 0 && b.blocker(q, i, r.Owner) == "" {
		return dlock.Grant{Acquired: true, Token: token, Handle: holdNode{node, b.conn.SessionID()}, Lost: lostWhenGone(own, node)}, nil
	}
	b.remove(dir, node, b.conn.SessionID())
	return dlock.Grant{}, err
}

// AcquireWait joins the queue and waits, watching only the one node it
// waits for (see blocker), until it may hold. When ctx ends it deletes its
// node.
func (b *backend) AcquireWait(ctx context.Context, r dlock.Request) (dlock.Grant, error) {
	dir := b.dir(r.Name)
	var q []string
	if b.kind == "read" { // a downgrade is told by the queue before the node
		if err := b.retry(ctx, b.conn.SessionID(), func() (err error) {
			q, err = b.queue(dir)
			return err
		}); err != nil {
			return dlock.Grant{}, err
		}
	}
	node, tokenOf, err := b.create(ctx, dir, r.Owner, b.tag(q, r.Owner))
	if err != nil {
		return dlock.Grant{}, err
	}
	session := b.conn.SessionID()
	leave := func(cause error) (dlock.Grant, error) {
		b.remove(dir, node, session)
		return dlock.Grant{}, cause
	}
	// rejoin joins the queue again when the waiting node is gone (its
	// session expired, or someone deleted it), as Curator does: Lock waits
	// until held or ctx ends.
	rejoin := func() error {
		b.remove(dir, node, session)
		var err error
		if node, tokenOf, err = b.create(ctx, dir, r.Owner, b.tag(nil, r.Owner)); err != nil {
			return err
		}
		session = b.conn.SessionID()
		return nil
	}
	// q is this waiter's view of the queue. Nodes are only appended after
	// ours (with larger sequences) or deleted, so a view with deletions
	// applied as they are seen is never too permissive: when the view says
	// we may hold, we may. When the node we wait for was first in the view,
	// its deletion thus costs us no read; otherwise nodes before it may be
	// gone unseen, and one read beats checking them one by one.
	q = nil
	for {
		fresh := q == nil
		if q == nil {
			err := b.retry(ctx, session, func() (err error) {
				q, err = b.queue(dir)
				return err
			})
			if err != nil && b.conn.SessionID() != session && ctx.Err() == nil {
				q = nil
				if err := rejoin(); err != nil {
					return dlock.Grant{}, err
				}
				continue
			}
			if err != nil {
				return leave(err)
			}
		}
		i := slices.Index(q, path.Base(node))
		if i < 0 || b.conn.SessionID() != session {
			q = nil
			if err := rejoin(); err != nil {
				return dlock.Grant{}, err
			}
			continue
		}
		waitFor := b.blocker(q, i, r.Owner)
		if waitFor == requeue {
			q = nil
			if err := rejoin(); err != nil {
				return dlock.Grant{}, err
			}
			continue
		}
		if waitFor == "" {
			token, own, err := tokenOf()
			if err != nil {
				return leave(err)
			}
			if !fresh {
				// The view was kept by deletion events alone. Trust it
				// only while our own node's watch is quiet (an outside
				// delete fires it before the event that brought us here)
				// and, for a writer, read again: a downgrade reader may
				// have joined behind us.
				select {
				case <-own:
					q = nil
					continue
				default:
				}
				if b.kind == "write" {
					q = nil
					continue
				}
			}
			return dlock.Grant{Acquired: true, Token: token, Handle: holdNode{node, session}, Lost: lostWhenGone(own, node)}, nil
		}
		var exists bool
		var watch <-chan zk.Event
		err := b.retry(ctx, session, func() (err error) {
			exists, _, watch, err = b.conn.ExistsW(dir + "/" + waitFor)
			return err
		})
		if err != nil && b.conn.SessionID() != session && ctx.Err() == nil {
			q = nil
			if err := rejoin(); err != nil {
				return dlock.Grant{}, err
			}
			continue
		}
		if err != nil {
			return leave(err)
		}
		gone := func() {
			if q[0] == waitFor {
				q = q[1:]
			} else {
				q = nil
			}
		}
		if !exists {
			gone()
			continue
		}
		select {
		case ev := <-watch:
			if ev.Type == zk.EventNodeDeleted {
				gone()
			} else {
				q = nil // a connection event: read the queue again
			}
		case <-ctx.Done():
			return leave(ctx.Err())
		}
	}
}

// Refresh checks that the hold's session is still the connection's and
// that its node exists. go-zookeeper calls take no context and wait for a
// reconnect, so the check runs under ctx: the lease's deadline must be
// able to pass while ZooKeeper is unreachable.
func (b *backend) Refresh(ctx context.Context, h dlock.Hold) error {
	n := h.Handle.(holdNode)
	if s := b.conn.SessionID(); s != n.session {
		return fmt.Errorf("%w: %w (session %#x, now %#x)", dlock.ErrNotHeld, ErrSessionExpired, n.session, s)
	}
	if st := b.conn.State(); st != zk.StateHasSession {
		return fmt.Errorf("zklock: disconnected from ZooKeeper (%v); the session may expire", st)
	}
	done := make(chan error, 1)
	go func() {
		exists, _, err := b.conn.Exists(n.path)
		if err == nil && !exists {
			err = fmt.Errorf("%w: node %s is gone", dlock.ErrNotHeld, n.path)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release deletes the hold's node. A release for an acquire whose outcome
// was unknown (nil Handle) has nothing to do: such a node is deleted by
// create's own clean-up (forget). Once the node's session has ended, the
// node is gone with it.
func (b *backend) Release(_ context.Context, h dlock.Hold) error {
	n, ok := h.Handle.(holdNode)
	if !ok {
		return nil
	}
	if s := b.conn.SessionID(); s != n.session {
		return fmt.Errorf("%w: %w (session %#x, now %#x)", dlock.ErrNotHeld, ErrSessionExpired, n.session, s)
	}
	err := b.conn.Delete(n.path, -1)
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: node %s is gone", dlock.ErrNotHeld, n.path)
	}
	return err
}

// Inspect reports the owner and Czxid of a node that holds the lock: the
// first in the queue, or for a read-write lock the first of this kind.
func (b *backend) Inspect(_ context.Context, name string) (dlock.Holder, bool, error) {
	dir := b.dir(name)
	for {
		q, err := b.queue(dir)
		if err != nil || len(q) == 0 {
			return dlock.Holder{}, false, err
		}
		first := q[0]
		if b.kind != "lock" && !strings.Contains(first, "-"+b.kind+"-") {
			if b.kind == "write" {
				return dlock.Holder{}, false, nil // readers hold it
			}
			if i := slices.IndexFunc(q, func(n string) bool { return strings.Contains(n, "-read-") }); i < 0 {
				return dlock.Holder{}, false, nil
			} else if first = q[i]; b.blocker(q, i, "") != "" {
				return dlock.Holder{}, false, nil // a writer holds it
			}
		}
		data, st, err := b.conn.Get(dir + "/" + first)
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile
		}
		if err != nil {
			return dlock.Holder{}, false, err
		}
		return dlock.Holder{Owner: string(data), Token: uint64(st.Czxid)}, true, nil
	}
}
