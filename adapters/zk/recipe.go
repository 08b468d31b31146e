// The protected-node recipe (Curator's): the ephemeral sequential node of a
// hold, found again by its GUID after a lost reply, and the queue order
// each kind of lock waits in.

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

	"github.com/dlockhq/dlock/internal/errjoin"
)

// nodePrefix marks a protected node: "_c_" GUID "-lock-" then the sequence.
const nodePrefix = "_c_"

// holdNode is a hold's Handle.
type holdNode struct {
	path    string
	session int64
}

// ensureDir creates root (persistent) and the lock's directory (a
// container, which the server removes once empty).
func (b *backend) ensureDir(dir string) error {
	if err := b.ensureRoot(); err != nil {
		return err
	}
	if _, err := b.conn.CreateContainer(dir, nil, zk.FlagContainer, b.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	return nil
}

// ensureRoot creates root and its parents (persistent nodes).
func (b *backend) ensureRoot() error {
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

// protectedPrefix is the name of a new protected node, up to the sequence
// the server appends: a GUID, by which the node is found again after a
// lost reply, then tag.
func protectedPrefix(tag string) string {
	var g [16]byte
	_, _ = rand.Read(g[:])
	return nodePrefix + hex.EncodeToString(g[:]) + "-" + tag + "-"
}

// tokenFunc returns a node's Czxid, the hold's token, and a watch on the
// node (see watched).
type tokenFunc func() (uint64, <-chan zk.Event, error)

// create makes this hold's protected ephemeral sequential node and returns
// its path and its tokenFunc (the read runs in the background: the
// caller's next request overlaps it). When the node was made first in its
// queue (see makeNode), first is its token, known at once; otherwise 0.
// After a connection loss mid-create it waits for the connection (while
// the session lives and ctx allows) and looks for the node by its GUID.
// If it cannot tell, a background search deletes the node once the
// connection is back (or the session ends, taking it along).
//
// The search can miss a node the lost Create did make: the leader may
// not have committed it yet. create then makes another, and the first,
// queued ahead of it, would block the queue for as long as the session
// lives (every waiter behind it, this one too). Once the new node is
// made, every earlier Create is committed too (the leader commits in
// order), so create deletes every other node with its GUID. A node found
// after two lost Creates may be the first's while the second's is not yet
// committed: create makes the node again then too, rather than keep one
// that a later copy could follow.
func (b *backend) create(ctx context.Context, dir, data, tag string) (p string, token tokenFunc, first uint64, err error) {
	// session is the one the Create goes out in. It is 0 before the
	// connection's first session: go-zookeeper holds requests until
	// there is one, so 0 turning into an id is no session ending.
	c := &creation{b: b, ctx: ctx, dir: dir, data: data, prefix: protectedPrefix(tag), session: b.conn.SessionID()}
	for {
		if err := ctx.Err(); err != nil {
			// The caller has gone: no Create is sent for it (one whose
			// reply was lost is cleaned up by fail).
			c.lost += boolInt(c.maybeCreated)
			return c.fail(err)
		}
		p, first, err = c.attempt()
		switch {
		case err == nil:
			return c.made(p, first)
		case errors.Is(err, errAgain):
		case errors.Is(err, zk.ErrNoNode) && !c.maybeCreated:
			if err := b.retry(ctx, c.session, func() error { return b.ensureDir(dir) }); err != nil {
				return c.fail(err)
			}
		case errors.Is(err, zk.ErrSessionExpired):
			// The node, if made, died with the session.
			c.session, c.maybeCreated, c.lost = b.conn.SessionID(), false, 0
		case errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer):
			if err := c.cutOff(err); err != nil {
				return c.fail(err)
			}
		default:
			return c.fail(err)
		}
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// creation is one create's state across lost replies.
type creation struct {
	b                 *backend
	ctx               context.Context
	dir, data, prefix string // data: see nodeData
	session           int64
	maybeCreated      bool      // the node may exist, unseen
	lost              int       // Creates of this session whose replies were lost
	cut               time.Time // since when the connection has failed
}

// errAgain is attempt's "make the node now": a search found none, or
// could not tell which of two lost Creates it found.
var errAgain = errors.New("create again")

// attempt makes the node, or, after a lost reply, looks for it.
func (c *creation) attempt() (p string, first uint64, err error) {
	if !c.maybeCreated {
		return c.b.makeNode(c.dir, c.prefix, c.data)
	}
	// Found, its place is read from the queue: first is 0.
	p, found, err := c.b.find(c.dir, c.prefix)
	if err == nil && (!found || c.lost > 1) {
		c.maybeCreated = false
		return "", 0, errAgain
	}
	return p, 0, err
}

// made returns node p, deleting the copies lost Creates may have left.
func (c *creation) made(p string, first uint64) (string, tokenFunc, uint64, error) {
	if c.session == 0 {
		c.session = c.b.conn.SessionID()
	}
	if c.lost > 0 {
		if err := c.b.deleteCopies(c.dir, c.prefix, p); err != nil {
			c.b.forget(c.dir, c.prefix, p, c.session)
		}
	}
	if first != 0 {
		// It holds: the read is the hold's watch (see lostWhenGone), and
		// outlives the caller's ctx.
		return p, c.b.watched(context.WithoutCancel(c.ctx), p, c.session), first, nil
	}
	return p, c.b.watched(c.ctx, p, c.session), 0, nil
}

// cutOff notes a connection error and waits a moment before the next
// try; it returns an error when there should be none.
func (c *creation) cutOff(err error) error {
	if !c.maybeCreated { // a Create's, not a search's
		c.lost++
	}
	c.maybeCreated = true
	if s := c.b.conn.SessionID(); s != c.session {
		if c.session != 0 {
			// A new session: the node, if made, died with the old.
			c.maybeCreated, c.lost = false, 0
		}
		c.session = s
	}
	if c.cut.IsZero() {
		c.cut = time.Now()
	}
	if gone := c.b.unreachable(c.cut, err); gone != nil {
		return gone
	}
	select {
	case <-c.ctx.Done():
		return errjoin.Join(c.ctx.Err(), err)
	case <-time.After(50 * time.Millisecond):
		return nil
	}
}

func (c *creation) fail(err error) (string, tokenFunc, uint64, error) {
	if c.lost > 0 && c.session != 0 {
		c.b.forget(c.dir, c.prefix, "", c.session)
	}
	return "", nil, 0, err
}

// makeNode sends the Create of the node with prefix in dir, in a multi
// request with a write to dir itself (no data, any version). The write's
// reply is dir's stat as the transaction left it: a node that is dir's
// only child then is first in the queue, and holds with no read of the
// queue. All of a multi request's operations share one transaction id,
// so dir's Mzxid there is the new node's Czxid: such a node's token,
// returned as first (0 for a node with others before it). A lock taken
// at once thus waits for two requests, the create and, at Unlock, the
// delete, where the recipe waits for a read of the queue between them.
// Where dir's ACL lets this client create but not write, the node is made
// by a plain Create, and first is 0; so it is while the client's last
// node had others before it (backend.crowded): a lock that is contended
// gets nothing from the write.
func (b *backend) makeNode(dir, prefix, data string) (p string, first uint64, err error) {
	create := &zk.CreateRequest{Path: dir + "/" + prefix, Data: []byte(data), Acl: b.acl, Flags: zk.FlagEphemeralSequential}
	if !b.plainCreate.Load() && !b.crowded.Load() {
		res, err := b.conn.Multi(create, &zk.SetDataRequest{Path: dir, Version: -1})
		switch {
		case err == nil && len(res) == 2:
			// The node is made; without the stat its place is read
			// from the queue.
			if st := res[1].Stat; st != nil && st.NumChildren == 1 {
				first = uint64(st.Mzxid)
			}
			b.crowded.Store(first == 0)
			return res[0].String, first, nil
		case err == nil:
			return "", 0, fmt.Errorf("zklock: a multi request answered with %d results", len(res))
		case !errors.Is(err, zk.ErrNoAuth) || len(res) != 2 || res[0].Error != nil:
			return "", 0, err // the Create's own error, or no answer
		}
		// Only the write to dir was refused: the whole request changed
		// nothing. Nodes are made by plain Creates from now on.
		b.plainCreate.Store(true)
	}
	p, err = b.conn.Create(create.Path, create.Data, create.Flags, create.Acl)
	return p, 0, err
}

// watched reads node p's Czxid, made by session, in the background (the
// caller's next request overlaps it) and returns its tokenFunc: it waits
// for the read and returns the Czxid with a watch on the node, which fires
// if the node goes (deleted from outside, or with the session). A node
// already gone is an error wrapping zk.ErrNoNode. The read is a get, not
// an exists: an exists that finds no node leaves a watch for its creation,
// on the server and in go-zookeeper, for the session's life, and the read
// of a node that held at once can come after its Unlock's delete.
func (b *backend) watched(ctx context.Context, p string, session int64) tokenFunc {
	czxid := make(chan error, 1)
	var (
		st  *zk.Stat
		own <-chan zk.Event
	)
	go func() {
		czxid <- b.retry(ctx, session, func() (err error) {
			_, st, own, err = b.conn.GetW(p)
			if errors.Is(err, zk.ErrNoNode) {
				err = fmt.Errorf("zklock: node %s is gone: %w", p, err)
			}
			return err
		})
	}()
	var (
		read  sync.Once
		token uint64
		terr  error
	)
	return func() (uint64, <-chan zk.Event, error) {
		read.Do(func() {
			if terr = <-czxid; terr == nil {
				token = uint64(st.Czxid)
			}
		})
		return token, own, terr
	}
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

// forget deletes, in the background, every node of dir with prefix but
// keep ("" for none): nodes this client may have created but cannot use.
// It retries until they are gone, their session ended, or the Locker
// closed.
func (b *backend) forget(dir, prefix, keep string, session int64) {
	go func() {
		for b.conn.SessionID() == session {
			if b.deleteCopies(dir, prefix, keep) == nil {
				return
			}
			select {
			case <-b.closed:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
}

// deleteCopies deletes every node of dir with prefix but keep.
func (b *backend) deleteCopies(dir, prefix, keep string) error {
	children, _, err := b.conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, c := range children {
		if p := dir + "/" + c; strings.HasPrefix(c, prefix) && p != keep {
			if err := b.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
		}
	}
	return nil
}

// remove deletes node, made by session in dir, or has it deleted in the
// background (forget) if the connection is down.
func (b *backend) remove(dir, node string, session int64) {
	if err := b.conn.Delete(node, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		base := path.Base(node)
		b.forget(dir, base[:len(base)-10], "", session) // the GUID prefix, without the sequence
	}
}

// ownerTag is a short hash of an owner id, in read-write node names, so a
// reader can see which write node is its own owner's (a downgrade).
func ownerTag(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:8])
}

// tag is what follows the protected GUID in this hold's node name (see
// order.tag).
func (b *backend) tag(q []string, owner string) string { return b.order.tag(q, owner) }

// blocker returns the node of q that node i must wait for, "" when it may
// hold now, or requeue (see order.blocker).
func (b *backend) blocker(q []string, i int, owner string) string {
	return b.order.blocker(q, i, owner)
}
