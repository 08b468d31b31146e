// Watch (dlock.Watcher): ZooKeeper watches on a lock's directory and its
// record, armed again after each event.

package zklock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
)

var _ dlock.Watcher = (*Locker)(nil)

// Watch implements dlock.Watcher: a watch on each name's directory (its
// queue's nodes: a waiter, a grant, a release, a session that expired)
// and one on its record node, each armed again after it fires; each
// request ends with ctx (see request), a frozen server included. The
// channel closes when ctx ends or ZooKeeper stops watching (the session
// expired, or the connection closed). go-zookeeper can lose a watch when
// it reconnects to another server (see the package doc): a watcher that
// must not miss a change also reads at an interval, as election's
// Observe does.
func (l *Locker) Watch(ctx context.Context, names ...string) (<-chan struct{}, error) {
	if len(names) == 0 {
		return nil, errors.New("zklock: Watch: no names")
	}
	for _, n := range names {
		if err := dlock.ValidateName(n); err != nil {
			return nil, fmt.Errorf("zklock: Watch: %w", err)
		}
	}
	type watched struct {
		arm func() (<-chan zk.Event, error)
		ev  <-chan zk.Event
	}
	var ws []*watched
	for _, n := range names {
		dir, record := l.b.dir(n), l.b.recordPath(n)
		ws = append(ws,
			&watched{arm: func() (<-chan zk.Event, error) { return l.b.watchChildren(dir) }},
			&watched{arm: func() (<-chan zk.Event, error) { _, _, ev, err := l.b.conn.ExistsW(record); return ev, err }})
	}
	for _, w := range ws { // in place before Watch returns
		var err error
		if w.ev, err = request(ctx, w.arm); err != nil {
			return nil, fmt.Errorf("zklock: Watch: %w", err)
		}
	}
	out := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel() // one ended: end them all, and close out
			for {
				select {
				case ev := <-w.ev:
					if ev.Err != nil || ev.Type == zk.EventNotWatching {
						return
					}
					select {
					case out <- struct{}{}:
					default:
					}
					var err error
					if w.ev, err = request(ctx, w.arm); err != nil {
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		cancel()
		close(out)
	}()
	return out, nil
}

// watchChildren watches dir's children, or, while dir does not exist
// (lock directories are containers, removed once empty), its creation.
func (b *backend) watchChildren(dir string) (<-chan zk.Event, error) {
	for {
		_, _, ev, err := b.conn.ChildrenW(dir)
		if !errors.Is(err, zk.ErrNoNode) {
			return ev, err
		}
		exists, _, ev, err := b.conn.ExistsW(dir)
		if err != nil || !exists {
			return ev, err
		}
		// Made in between: its data watch would miss its children.
	}
}
