// backend implements driver.Backend on ZooKeeper with the recipe.

package zklock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
	"github.com/dlockhq/dlock/internal/timeunit"
)

type backend struct {
	conn      *zk.Conn
	root      string
	acl       []zk.ACL
	closed    chan struct{}
	closeOnce sync.Once
	// order is the primitive's queue discipline (see order.go); suffix
	// keeps each primitive's directory apart (escape never writes '.').
	order  order
	suffix string
	// patience is how long a call retries while ZooKeeper is unreachable:
	// the lease TTL.
	patience time.Duration
	// recheck is the first pause before a waiter looks again at the node
	// it waits for, in case its watch was lost: Config.PushFallback.
	recheck time.Duration
	// released holds the paths of nodes a hand-off deleted without
	// granting the lock on (see handing.Transfer), until their Release.
	released sync.Map
	// plainCreate is set once a lock's directory refused this client the
	// write makeNode pairs with each Create.
	plainCreate atomic.Bool
	// crowded is set while this client's last node had others queued
	// before it: the next is made by a plain Create, since makeNode's
	// write to the directory (work for the server) only pays for a node
	// that holds at once. A queue read that finds the lock free, or
	// holds only this client's node, clears it.
	crowded atomic.Bool
}

func newBackend(conn *zk.Conn, root string, o order, suffix string) *backend {
	return &backend{conn: conn, root: root, acl: zk.WorldACL(zk.PermAll), closed: make(chan struct{}), order: o, suffix: suffix, recheck: 2 * time.Second}
}

var (
	_ driver.Backend       = (*backend)(nil)
	_ driver.Blocker       = (*backend)(nil)
	_ dlock.Inspector      = (*backend)(nil)
	_ driver.SessionBound  = (*backend)(nil)
	_ driver.PayloadKeeper = (*backend)(nil)
	_ driver.Sharer        = (*backend)(nil)
)

// HoldsEndWithSession implements driver.SessionBound: a lock node lives
// until it is deleted or its session ends.
func (*backend) HoldsEndWithSession() bool { return true }

// SharesHolds implements driver.Sharer: readers' nodes coexist.
func (b *backend) SharesHolds() bool { return b.order.shares() }

// Acquire makes one attempt: it joins the queue only if it could hold at
// once, and leaves again unless it can.
func (b *backend) Acquire(ctx context.Context, r driver.Request) (driver.Grant, error) {
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
		return driver.Grant{}, err
	}
	b.crowded.Store(len(q) > 0)
	node, tokenOf, first, err := b.create(ctx, dir, nodeData(r), b.tag(q, r.Owner))
	if err != nil {
		return driver.Grant{}, err
	}
	if first != 0 && !isDowngrade(node) { // made first in the queue (see makeNode)
		return driver.Grant{Acquired: true, Token: first, Handle: holdNode{node, b.conn.SessionID()}, Lost: b.lostWhenGone(tokenOf, node, b.conn.SessionID())}, nil
	}
	q, err = b.queue(dir)
	token, _, terr := tokenOf()
	if err == nil {
		err = terr
	}
	if i := slices.Index(q, path.Base(node)); err == nil && i >= 0 && b.blocker(q, i, r.Owner) == "" {
		return driver.Grant{Acquired: true, Token: token, Handle: holdNode{node, b.conn.SessionID()}, Lost: b.lostWhenGone(tokenOf, node, b.conn.SessionID())}, nil
	}
	b.remove(dir, node, b.conn.SessionID())
	return driver.Grant{}, err
}

// AcquireWait joins the queue and waits, watching only the one node it
// waits for (see blocker), until it may hold. When ctx ends it deletes its
// node.
func (b *backend) AcquireWait(ctx context.Context, r driver.Request) (driver.Grant, error) {
	w, err := b.join(ctx, r)
	if err != nil {
		return driver.Grant{}, err
	}
	for {
		if g, done, err := w.step(); done {
			return g, err
		}
	}
}

// waiter is one AcquireWait's place in a lock's queue: its node, the
// session that made it, and its view of the queue. Only its own methods
// change it.
type waiter struct {
	b       *backend
	ctx     context.Context
	r       driver.Request
	dir     string
	node    string
	tokenOf tokenFunc
	first   uint64 // the node's token when it was made first in the queue
	session int64
	// q is the waiter's view of the queue, nil when it must be read.
	// Nodes are only appended after ours (with larger sequences) or
	// deleted, so a view with deletions applied as they are seen is never
	// too permissive: when the view says we may hold, we may. When the
	// node we wait for was first in the view, its deletion thus costs us
	// no read; otherwise nodes before it may be gone unseen, and one read
	// beats checking them one by one.
	q     []string
	pause time.Duration // before the next look at the node waited for
}

// join makes r's node in the queue.
func (b *backend) join(ctx context.Context, r driver.Request) (*waiter, error) {
	w := &waiter{b: b, ctx: ctx, r: r, dir: b.dir(r.Name), pause: b.recheck}
	var q []string
	if b.order.readsFirst() { // a downgrade is told by the queue before the node
		if err := b.retry(ctx, b.conn.SessionID(), func() (err error) {
			q, err = b.queue(w.dir)
			return err
		}); err != nil {
			return nil, err
		}
	}
	var err error
	if w.node, w.tokenOf, w.first, err = b.create(ctx, w.dir, nodeData(r), b.tag(q, r.Owner)); err != nil {
		return nil, err
	}
	w.session = b.conn.SessionID()
	return w, nil
}

// step looks at the queue once and either grants, fails (done), or has
// waited for the node before ours to go.
func (w *waiter) step() (g driver.Grant, done bool, err error) {
	if w.first != 0 && !isDowngrade(w.node) { // made first in the queue (see makeNode)
		return w.grant(w.first), true, nil
	}
	fresh := w.q == nil
	if fresh {
		if err := w.readQueue(); err != nil {
			return w.failed(err)
		}
	}
	i := slices.Index(w.q, path.Base(w.node))
	if i < 0 || w.b.conn.SessionID() != w.session {
		return w.rejoin()
	}
	switch waitFor := w.b.blocker(w.q, i, w.r.Owner); waitFor {
	case requeue:
		return w.rejoin()
	case "":
		return w.mayHold(fresh)
	default:
		if err := w.waitGone(waitFor); err != nil {
			return w.failed(err)
		}
		// The node waited for is gone.
		if w.q != nil && w.q[0] == waitFor {
			w.q = w.q[1:]
		} else {
			w.q = nil
		}
		return driver.Grant{}, false, nil
	}
}

func (w *waiter) grant(token uint64) driver.Grant {
	return driver.Grant{Acquired: true, Token: token, Handle: holdNode{w.node, w.session}, Lost: w.b.lostWhenGone(w.tokenOf, w.node, w.session)}
}

func (w *waiter) readQueue() error {
	err := w.b.retry(w.ctx, w.session, func() (err error) {
		w.q, err = w.b.queue(w.dir)
		return err
	})
	if err == nil && len(w.q) == 1 {
		w.b.crowded.Store(false) // ours alone: the lock was free
	}
	return err
}

// failed ends the wait on a request's error, unless the session ended
// with ctx live: the node went with it, and the waiter joins again.
func (w *waiter) failed(err error) (driver.Grant, bool, error) {
	if w.b.conn.SessionID() != w.session && w.ctx.Err() == nil {
		return w.rejoin()
	}
	w.b.remove(w.dir, w.node, w.session)
	return driver.Grant{}, true, err
}

// rejoin joins the queue again when the waiting node is gone (its
// session expired, or someone deleted it), as Curator does: Lock waits
// until held or ctx ends.
func (w *waiter) rejoin() (driver.Grant, bool, error) {
	w.b.remove(w.dir, w.node, w.session)
	w.q = nil
	var err error
	if w.node, w.tokenOf, w.first, err = w.b.create(w.ctx, w.dir, nodeData(w.r), w.b.tag(nil, w.r.Owner)); err != nil {
		return driver.Grant{}, true, err
	}
	w.session = w.b.conn.SessionID()
	return driver.Grant{}, false, nil
}

// mayHold grants when the view of the queue, fresh or kept by deletion
// events, says the waiter holds and its node is still there.
func (w *waiter) mayHold(fresh bool) (driver.Grant, bool, error) {
	token, own, err := w.tokenOf()
	if errors.Is(err, zk.ErrNoNode) { // deleted from outside: queue again
		return w.rejoin()
	}
	if err != nil {
		w.b.remove(w.dir, w.node, w.session)
		return driver.Grant{}, true, err
	}
	if !fresh {
		// The view was kept by deletion events alone. Trust it only
		// while our own node's watch is quiet (an outside delete fires
		// it before the event that brought us here) and, for a writer,
		// read again: a downgrade reader may have joined behind us.
		select {
		case <-own:
			w.q = nil
			return driver.Grant{}, false, nil
		default:
		}
		if w.b.order.rereads() {
			w.q = nil
			return driver.Grant{}, false, nil
		}
	}
	return w.grant(token), true, nil
}

// waitGone waits until node waitFor is deleted, or for a connection event
// (the view of the queue is then dropped).
func (w *waiter) waitGone(waitFor string) error {
	var exists bool
	var watch <-chan zk.Event
	err := w.b.retry(w.ctx, w.session, func() (err error) {
		// A get, not an exists: an exists that finds the node gone
		// leaves a watch for its creation, on the server and in
		// go-zookeeper, for the session's life (as Curator does).
		_, _, watch, err = w.b.conn.GetW(w.dir + "/" + waitFor)
		exists = err == nil
		if errors.Is(err, zk.ErrNoNode) {
			err = nil
		}
		return err
	})
	for err == nil && exists {
		exists, err = w.watch(waitFor, watch)
	}
	return err
}

// watch waits for the deletion event of waitFor. go-zookeeper can lose a
// watch when it reconnects (re-registering it may fail, and it does not
// say), so the node is also looked at again now and then, less often the
// longer the wait.
func (w *waiter) watch(waitFor string, watch <-chan zk.Event) (exists bool, err error) {
	recheck := time.NewTimer(w.pause)
	defer recheck.Stop()
	select {
	case ev := <-watch:
		if ev.Type != zk.EventNodeDeleted {
			w.q = nil // a connection event: read the queue again
		}
		return false, nil
	case <-recheck.C:
		w.pause = min(2*w.pause, maxRecheck)
		if w.b.conn.State() != zk.StateHasSession {
			// No request while disconnected: go-zookeeper would send it
			// the moment it reconnects, racing its own re-registration
			// of watches (a data race in go-zookeeper v1.0.4). The next
			// look will tell.
			return true, nil
		}
		err = w.b.retry(w.ctx, w.session, func() (err error) {
			exists, _, err = w.b.conn.Exists(w.dir + "/" + waitFor)
			return err
		})
		return exists, err
	case <-w.ctx.Done():
		return false, w.ctx.Err()
	}
}

// maxRecheck caps the pause between looks at the node a waiter waits for
// (see AcquireWait).
const maxRecheck = 30 * time.Second

// Refresh checks that the hold's session is still the connection's and
// that its node exists. go-zookeeper calls take no context and wait for a
// reconnect, so the check runs under ctx: the lease's deadline must be
// able to pass while ZooKeeper is unreachable.
func (b *backend) Refresh(ctx context.Context, h driver.Hold) error {
	n := h.Handle.(holdNode)
	if s := b.conn.SessionID(); s != n.session {
		return fmt.Errorf("%w: %w (session %#x, now %#x)", dlock.ErrNotHeld, ErrSessionExpired, n.session, s)
	}
	if st := b.conn.State(); st != zk.StateHasSession {
		return fmt.Errorf("zklock: disconnected from ZooKeeper (%v); the session may expire", st)
	}
	exists, err := request(ctx, func() (bool, error) {
		exists, _, err := b.conn.Exists(n.path)
		return exists, err
	})
	if err == nil && !exists {
		err = fmt.Errorf("%w: node %s is gone", dlock.ErrNotHeld, n.path)
	}
	return err
}

// Release deletes the hold's node. A release for an acquire whose outcome
// was unknown (nil Handle) deletes the nodes this session made for its
// owner (releaseByOwner). One whose node a hand-off deleted (see
// handing.Transfer) has nothing to do. Once the node's session has
// ended, the node is gone with it.
func (b *backend) Release(ctx context.Context, h driver.Hold) error {
	n, ok := h.Handle.(holdNode)
	if !ok {
		return b.releaseByOwner(ctx, h)
	}
	if _, done := b.released.LoadAndDelete(n.path); done {
		return nil
	}
	if s := b.conn.SessionID(); s != n.session {
		return fmt.Errorf("%w: %w (session %#x, now %#x)", dlock.ErrNotHeld, ErrSessionExpired, n.session, s)
	}
	_, err := request(ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(n.path, -1) })
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: node %s is gone", dlock.ErrNotHeld, n.path)
	}
	if err != nil && b.connClosed() {
		// Closing the connection ended its session (or it expires, if
		// the close could not reach ZooKeeper): the node goes with it,
		// and no other session may delete it.
		return fmt.Errorf("%w: %w: node %s goes with its session", dlock.ErrNotHeld, ErrConnClosed, n.path)
	}
	return err
}

// releaseByOwner deletes the nodes of h's name that this session made
// for h.Owner: the hold of an attempt whose outcome was unknown, whose
// Create may have been made after its caller gave up (go-zookeeper's
// calls take no ctx, so a Create once sent goes through). ErrNotHeld when
// there is none: the Client then looks again at growing pauses for a
// while, for a Create still on its way.
func (b *backend) releaseByOwner(ctx context.Context, h driver.Hold) error {
	err := b.deleteOwners(ctx, h)
	if err != nil && !errors.Is(err, dlock.ErrNotHeld) && b.connClosed() {
		// The session ends with the connection: its nodes go with it.
		return fmt.Errorf("%w: %w: the nodes of %q go with their session", dlock.ErrNotHeld, ErrConnClosed, h.Name)
	}
	return err
}

// deleteOwners is releaseByOwner's search and delete.
func (b *backend) deleteOwners(ctx context.Context, h driver.Hold) error {
	dir := b.dir(h.Name)
	children, err := request(ctx, func() ([]string, error) {
		c, _, err := b.conn.Children(dir)
		return c, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: %q has no queue", dlock.ErrNotHeld, h.Name)
	}
	if err != nil {
		return err
	}
	session, found := b.conn.SessionID(), false
	for _, c := range children {
		if !strings.HasPrefix(c, nodePrefix) {
			continue
		}
		p := dir + "/" + c
		type node struct {
			data []byte
			st   *zk.Stat
		}
		n, err := request(ctx, func() (node, error) {
			data, st, err := b.conn.Get(p)
			return node{data, st}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return err
		}
		if owner, _, _ := strings.Cut(string(n.data), "\n"); owner != h.Owner || n.st.EphemeralOwner != session {
			continue
		}
		_, err = request(ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(p, -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		found = true
	}
	if !found {
		return fmt.Errorf("%w: no node of %q for %q", dlock.ErrNotHeld, h.Name, h.Owner)
	}
	return nil
}

// ForceRelease implements dlock.ForceReleaser: it deletes the holder's
// node; the next waiter, which watches it, is granted, and the holder's
// watchdog finds its node gone.
func (b *backend) ForceRelease(ctx context.Context, name string) (dlock.Holder, bool, error) {
	for {
		n, ok, err := b.holderNode(ctx, name)
		if err != nil || !ok {
			return dlock.Holder{}, false, err
		}
		_, err = request(ctx, func() (struct{}, error) { return struct{}{}, b.conn.Delete(n.path, n.st.Version) })
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile
		}
		if err != nil {
			return dlock.Holder{}, false, err
		}
		return n.holder(), true, nil
	}
}

// List implements dlock.Lister: the lock directories under the root
// whose names start with prefix, each with its holder, in name order.
func (b *backend) List(ctx context.Context, prefix string, limit int) ([]dlock.Held, error) {
	root := b.root
	dirs, err := request(ctx, func() ([]string, error) {
		children, _, err := b.conn.Children(root)
		return children, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range dirs {
		esc, ok := strings.CutSuffix(d, b.suffix)
		if !ok || strings.Contains(esc, ".") || root == "/" && "/"+d == systemTree {
			continue // another kind's, a record, the clock, ZooKeeper's own
		}
		if name, err := url.PathUnescape(esc); err == nil && strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	var held []dlock.Held
	for _, name := range names {
		if len(held) == limit {
			break
		}
		n, ok, err := b.holderNode(ctx, name)
		if err != nil {
			return nil, err
		}
		if ok {
			held = append(held, dlock.Held{Name: name, Holder: n.holder(), Waiters: n.behind})
		}
	}
	return held, nil
}

// Inspect reports the owner and Czxid of a node that holds the lock: the
// first in the queue, or for a read-write lock the first of this kind.
func (b *backend) Inspect(ctx context.Context, name string) (dlock.Holder, bool, error) {
	n, ok, err := b.holderNode(ctx, name)
	if err != nil || !ok {
		return dlock.Holder{}, false, err
	}
	return n.holder(), true, nil
}

// nodeData is what r's lock node holds: its owner id and, after a
// newline, its payload (neither can contain one).
func nodeData(r driver.Request) string {
	if r.Payload == "" {
		return r.Owner
	}
	return r.Owner + "\n" + r.Payload
}

// KeepsPayload implements driver.PayloadKeeper: the payload is in the
// hold's node, after its owner id.
func (*backend) KeepsPayload() bool { return true }

// lockNode is a lock node as read: its path, data (see nodeData) and
// stat, and how many nodes were queued behind it.
type lockNode struct {
	path   string
	data   []byte
	st     *zk.Stat
	behind int
}

// holder is the holder whose node n is. Its age is from the node's
// creation time, by the server's wall clock, to this process's.
func (n lockNode) holder() dlock.Holder {
	owner, payload, _ := strings.Cut(string(n.data), "\n")
	return dlock.Holder{Owner: owner, Payload: payload, Token: uint64(n.st.Czxid),
		Age: timeunit.AgeOfUnixMilli(n.st.Ctime, time.Now())}
}

// holderNode reads the node that holds name's lock; ok is false when none
// does.
func (b *backend) holderNode(ctx context.Context, name string) (lockNode, bool, error) {
	dir := b.dir(name)
	for {
		q, err := request(ctx, func() ([]string, error) { return b.queue(dir) })
		if err != nil || len(q) == 0 {
			return lockNode{}, false, err
		}
		i := b.order.holder(q)
		if i < 0 {
			return lockNode{}, false, nil
		}
		n := lockNode{path: dir + "/" + q[i], behind: len(q) - 1 - i}
		n, err = request(ctx, func() (lockNode, error) {
			data, st, err := b.conn.Get(n.path)
			return lockNode{n.path, data, st, n.behind}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			continue // released meanwhile
		}
		return n, err == nil, err
	}
}

// DBSystem implements driver.DBSystem.
func (*backend) DBSystem() string { return "zookeeper" }
