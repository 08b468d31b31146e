package zklock

import (
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
)

// ReadWrite is Curator's InterProcessReadWriteLock on ZooKeeper: any number
// of readers, or one writer, granted in request order. Read and write
// nodes share one sequential queue; a writer waits for the node before it,
// a reader only for the nearest writer before it, so a release wakes only
// the waiters it unblocks. Read and Write are sibling Lockers (see
// dlock.Client.NewSibling): a call chain holding the write lock (its ctx
// carries the write lease) may also take the read lock (downgrade); a
// reader cannot upgrade.
type ReadWrite struct {
	Read, Write *Locker
}

// NewReadWrite returns a read-write lock client whose locks live under
// root. It does no I/O; conn stays the caller's.
func NewReadWrite(conn *zk.Conn, root string, opts ...dlock.Option) (*ReadWrite, error) {
	if conn == nil {
		return nil, errors.New("zklock: nil *zk.Conn")
	}
	if err := validRoot(root); err != nil {
		return nil, err
	}
	w, err := newLocker(conn, root, writer{}, ".rw", opts...)
	if err != nil {
		return nil, err
	}
	rb := newBackend(conn, root, reader{}, ".rw")
	rb.patience, rb.recheck, rb.acl = w.b.patience, w.b.recheck, w.b.acl
	rc, err := w.NewSibling(rb)
	if err != nil {
		return nil, err
	}
	return &ReadWrite{Read: &Locker{Client: rc, b: rb}, Write: w}, nil
}
