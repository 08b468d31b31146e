// Records (dlock.Recorder): one persistent node per name beside its lock
// directory, written with a version check so that a write never passes
// one with a larger token.

package zklock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
)

var (
	_ dlock.Recorder = (*backend)(nil)
	_ dlock.Recorder = (*Locker)(nil)
)

// recordSuffix ends a record's node name (escape never writes '.', so no
// lock directory is named so); clockNode is the node whose writes tell the
// server's time.
const (
	recordSuffix = ".record"
	clockNode    = ".clock"
)

// A record node's data: the token (8 bytes, big-endian), when the token
// first wrote it (8 bytes, ms since the epoch on the server's clock; 0:
// the node's Mtime, for the write that brought the token), the value.
const recordHeader = 16

func (b *backend) recordPath(name string) string {
	return b.under(escape(name) + recordSuffix)
}

func (b *backend) under(node string) string {
	if b.root == "/" {
		return "/" + node
	}
	return b.root + "/" + node
}

// Record implements dlock.Recorder: read the node, compare tokens, write
// it back on the version read (a write between the two makes it try
// again).
func (b *backend) Record(ctx context.Context, name string, token uint64, value []byte) error {
	p := b.recordPath(name)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, st, err := b.get(ctx, p)
		if errors.Is(err, zk.ErrNoNode) {
			_, err = request(ctx, func() (string, error) {
				if err := b.ensureRoot(); err != nil {
					return "", err
				}
				return b.conn.Create(p, encodeRecord(token, 0, value), zk.FlagPersistent, b.acl)
			})
			if errors.Is(err, zk.ErrNodeExists) {
				continue
			}
			return err
		}
		if err != nil {
			return err
		}
		cur, since, _, err := decodeRecord(name, data, st)
		if err != nil {
			return err
		}
		if cur > token {
			return fmt.Errorf("%w: record %q, token %d", dlock.ErrStale, name, token)
		}
		var keep int64 // a new token: this write's Mtime
		if cur == token {
			keep = since
		}
		_, err = request(ctx, func() (*zk.Stat, error) { return b.conn.Set(p, encodeRecord(token, keep, value), st.Version) })
		if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
			continue
		}
		return err
	}
}

// Recorded implements dlock.Recorder. The age is counted on the server's
// clock: a write to the clock node tells its time.
func (b *backend) Recorded(ctx context.Context, name string) (dlock.Record, bool, error) {
	data, st, err := b.get(ctx, b.recordPath(name))
	if errors.Is(err, zk.ErrNoNode) {
		return dlock.Record{}, false, nil
	}
	if err != nil {
		return dlock.Record{}, false, err
	}
	token, since, value, err := decodeRecord(name, data, st)
	if err != nil {
		return dlock.Record{}, false, err
	}
	now, err := b.serverTime(ctx)
	if err != nil {
		return dlock.Record{}, false, err
	}
	return dlock.Record{Value: value, Token: token, Age: max(time.Duration(now-since)*time.Millisecond, 0)}, true, nil
}

// serverTime is the ZooKeeper leader's clock (ms since the epoch): the
// Mtime of a write to the clock node.
func (b *backend) serverTime(ctx context.Context) (int64, error) {
	p := b.under(clockNode)
	st, err := request(ctx, func() (*zk.Stat, error) {
		st, err := b.conn.Set(p, nil, -1)
		if !errors.Is(err, zk.ErrNoNode) {
			return st, err
		}
		if err := b.ensureRoot(); err != nil {
			return nil, err
		}
		if _, err := b.conn.Create(p, nil, zk.FlagPersistent, b.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return nil, err
		}
		return b.conn.Set(p, nil, -1)
	})
	if err != nil {
		return 0, err
	}
	return st.Mtime, nil
}

// get reads node p under ctx.
func (b *backend) get(ctx context.Context, p string) ([]byte, *zk.Stat, error) {
	type got struct {
		data []byte
		st   *zk.Stat
	}
	g, err := request(ctx, func() (got, error) {
		data, st, err := b.conn.Get(p)
		return got{data, st}, err
	})
	return g.data, g.st, err
}

func encodeRecord(token uint64, since int64, value []byte) []byte {
	data := make([]byte, recordHeader, recordHeader+len(value))
	binary.BigEndian.PutUint64(data, token)
	binary.BigEndian.PutUint64(data[8:], uint64(since))
	return append(data, value...)
}

// decodeRecord returns a record node's token, since (ms on the server's
// clock) and value.
func decodeRecord(name string, data []byte, st *zk.Stat) (token uint64, since int64, value []byte, err error) {
	if len(data) < recordHeader {
		return 0, 0, nil, fmt.Errorf("zklock: record %q: malformed node of %d bytes", name, len(data))
	}
	since = int64(binary.BigEndian.Uint64(data[8:]))
	if since == 0 {
		since = st.Mtime
	}
	return binary.BigEndian.Uint64(data), since, data[recordHeader:], nil
}
