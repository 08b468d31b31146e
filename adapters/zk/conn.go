// The connection: retrying requests across a reconnect within ctx, and
// telling a closed or long-unreachable connection from a passing break.

package zklock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errjoin"
)

// request runs one go-zookeeper request under ctx. go-zookeeper calls take
// no context and wait through a reconnect, so f runs on a goroutine of its
// own and request returns when ctx ends, whatever f is doing; f's late
// result is dropped (each caller's f only reads, or deletes its own node).
func request[T any](ctx context.Context, f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// retry runs f until it returns something other than a connection error,
// while the session lives and ctx allows: a reconnect to another server
// keeps the session, its nodes and their places in the queue. Session 0
// (none yet) is the connection's first: go-zookeeper holds requests until
// there is one.
func (b *backend) retry(ctx context.Context, session int64, f func() error) error {
	var cut time.Time
	for {
		err := f()
		if session == 0 {
			session = b.conn.SessionID()
		}
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

// lostWhenGone turns the watch on a held node, made by session, into
// driver.Grant.Lost: the lease ends as soon as the node is deleted (from
// outside, or by Unlock, when the lease has already ended) or its session
// expires, not at the next renewal. A watch that fires for a disconnection
// alone is no loss (the session, and the node, may live on; renewal will
// tell); the watchdog then checks as usual. The watch is watch's, which
// for a node that held at once may still be on its way (see makeNode):
// its read finding the node gone, or its session ended, is a loss as
// well.
func (b *backend) lostWhenGone(watch tokenFunc, node string, session int64) <-chan error {
	lost := make(chan error, 1)
	go func() {
		_, own, err := watch()
		switch {
		case errors.Is(err, zk.ErrNoNode):
			lost <- fmt.Errorf("%w: node %s was deleted", dlock.ErrNotHeld, node)
			return
		case err != nil && (errors.Is(err, zk.ErrSessionExpired) || b.conn.SessionID() != session):
			lost <- fmt.Errorf("%w: %w: node %s went with it", dlock.ErrNotHeld, ErrSessionExpired, node)
			return
		case err != nil: // the connection closed, or out of reach past the TTL
			return
		}
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
