// Records (dlock.Recorder): one key per name beside its lock's prefix,
// written with a revision check so that a write never passes one with a
// larger token.

package etcdlock

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
)

var _ dlock.Recorder = (*backend)(nil)

// A record's value: the token (8 bytes, big-endian), when the token first
// wrote it (8 bytes, ms since the epoch on the writer's clock), the value.
const recordHeader = 16

func (b *backend) recordKey(name string) string { return b.root + "/record/" + escape(name) }

// Record implements dlock.Recorder: read the key, compare tokens, write
// it back if nobody wrote it since (a write between the two makes it try
// again).
func (b *backend) Record(ctx context.Context, name string, token uint64, value []byte) error {
	key := b.recordKey(name)
	for {
		resp, err := b.client.Get(ctx, key)
		if err != nil {
			return err
		}
		since := b.now()
		unchanged := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(resp.Kvs) > 0 {
			kv := resp.Kvs[0]
			r, first, err := decodeRecord(name, kv.Value)
			if err != nil {
				return err
			}
			if r.Token > token {
				return fmt.Errorf("%w: record %q, token %d", dlock.ErrStale, name, token)
			}
			if r.Token == token {
				since = first
			}
			unchanged = clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)
		}
		put, err := b.client.Txn(ctx).If(unchanged).Then(clientv3.OpPut(key, string(encodeRecord(token, since, value)))).Commit()
		if err != nil {
			return err
		}
		if put.Succeeded {
			return nil
		}
	}
}

// Recorded implements dlock.Recorder.
func (b *backend) Recorded(ctx context.Context, name string) (dlock.Record, bool, error) {
	resp, err := b.client.Get(ctx, b.recordKey(name))
	if err != nil || len(resp.Kvs) == 0 {
		return dlock.Record{}, false, err
	}
	r, first, err := decodeRecord(name, resp.Kvs[0].Value)
	if err != nil {
		return dlock.Record{}, false, err
	}
	r.Age = max(b.now().Sub(first), 0)
	return r, true, nil
}

func encodeRecord(token uint64, since time.Time, value []byte) []byte {
	data := make([]byte, recordHeader, recordHeader+len(value))
	binary.BigEndian.PutUint64(data, token)
	binary.BigEndian.PutUint64(data[8:], uint64(since.UnixMilli()))
	return append(data, value...)
}

// decodeRecord reads a record's value: the record, without its Age, and
// when its token first wrote it.
func decodeRecord(name string, data []byte) (dlock.Record, time.Time, error) {
	if len(data) < recordHeader {
		return dlock.Record{}, time.Time{}, fmt.Errorf("etcdlock: the record of %q is %d bytes, not a record", name, len(data))
	}
	r := dlock.Record{Token: binary.BigEndian.Uint64(data), Value: data[recordHeader:]}
	return r, time.UnixMilli(int64(binary.BigEndian.Uint64(data[8:]))), nil
}
