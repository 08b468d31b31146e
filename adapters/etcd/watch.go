// Watch (dlock.Watcher): etcd watches on a lock's prefix and its record.

package etcdlock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
)

var _ dlock.Watcher = (*Locker)(nil)

// Watch implements dlock.Watcher: one etcd watch on each name's queue
// (its lock keys: a waiter's key, a grant, a release, an expired lease)
// and one on its record. The channel closes when ctx ends or a watch
// ends (etcd cancelled it, say after a compaction, or lost its leader).
func (l *Locker) Watch(ctx context.Context, names ...string) (<-chan struct{}, error) {
	if len(names) == 0 {
		return nil, errors.New("etcdlock: Watch: no names")
	}
	for _, n := range names {
		if err := dlock.ValidateName(n); err != nil {
			return nil, fmt.Errorf("etcdlock: Watch: %w", err)
		}
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	var chans []clientv3.WatchChan
	for _, n := range names {
		chans = append(chans,
			l.b.client.Watch(wctx, l.b.prefix(n), clientv3.WithPrefix(), clientv3.WithCreatedNotify()),
			l.b.client.Watch(wctx, l.b.recordKey(n), clientv3.WithCreatedNotify()))
	}
	if err := created(ctx, wctx, chans); err != nil {
		cancel()
		return nil, fmt.Errorf("etcdlock: Watch: %w", err)
	}
	return merged(chans, cancel), nil
}

// created waits until etcd says each watch of chans is in place.
func created(ctx, wctx context.Context, chans []clientv3.WatchChan) error {
	for _, ch := range chans {
		select {
		case resp, ok := <-ch:
			if err := resp.Err(); !ok || err != nil || !resp.Created {
				return errors.Join(err, wctx.Err(), errWatchEnded)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// merged is one channel for chans' events; when any watch ends, cancel
// ends the others and it closes.
func merged(chans []clientv3.WatchChan, cancel context.CancelFunc) <-chan struct{} {
	out := make(chan struct{}, 1)
	var wg sync.WaitGroup
	for _, ch := range chans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cancel()
			for resp := range ch {
				if resp.Err() != nil || resp.Canceled {
					return
				}
				if len(resp.Events) > 0 {
					select {
					case out <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		cancel()
		close(out)
	}()
	return out
}

// errWatchEnded is Watch's error for a watch that ended before etcd said
// it was in place.
var errWatchEnded = errors.New("the watch ended before it was in place")
