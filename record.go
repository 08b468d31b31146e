package dlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock/internal/errjoin"
)

// Record is what a Recorder keeps for a name: a small value written by a
// holder of the name's lock and fenced by its token.
type Record struct {
	// Value is the value last written.
	Value []byte
	// Token is the fencing token of the hold that last wrote it.
	Token uint64
	// Age is how long ago, by the server's clock, Token first wrote the
	// record: for a leader's record, how long it has led.
	Age time.Duration
}

// MaxRecordValue is the largest Record value every backend keeps.
const MaxRecordValue = 16 << 10

// Recorder is implemented by Lockers whose server keeps a small record per
// name beside its locks, written by a holder and fenced by its token:
// what package election publishes about a leader and what package
// schedlock remembers of a job's last run. Records are a namespace of
// their own: the record and the lock of one name are distinct things,
// and only the token ties them. Every backend of this module implements
// it (the SQL ones in the dlock_records table of package migrations).
type Recorder interface {
	// Record writes value (at most MaxRecordValue bytes) as name's record
	// on behalf of the hold whose fencing token is token. It fails with
	// ErrStale, writing nothing, when the record was written by a hold
	// with a larger token: a successor's record is never overwritten by
	// a holder that lost its lock. ctx governs the request.
	Record(ctx context.Context, name string, token uint64, value []byte) error
	// Recorded returns name's record; ok is false when there is none. ctx
	// governs the request.
	Recorded(ctx context.Context, name string) (r Record, ok bool, err error)
}

// ErrStale is returned by Recorder.Record when the record was written by
// a hold with a larger fencing token than the writer's.
var ErrStale = errors.New("dlock: stale token: a later hold has written the record")

// Record implements Recorder when the backend does; otherwise it returns
// errors.ErrUnsupported. Bad input (an invalid name, token 0, a value over
// MaxRecordValue) fails before any I/O. ctx governs the request.
func (c *Client) Record(ctx context.Context, name string, token uint64, value []byte) error {
	rec, err := c.recorder(ctx, "record", name)
	if err != nil {
		return err
	}
	switch {
	case token == 0:
		return fmt.Errorf("dlock: record %q: token 0 is no hold's token", name)
	case len(value) > MaxRecordValue:
		return fmt.Errorf("dlock: record %q: value of %d bytes, more than MaxRecordValue (%d)", name, len(value), MaxRecordValue)
	}
	_, err = read(c.caller, ctx, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, rec.Record(ctx, name, token, value)
	})
	return errjoin.OneLine(err)
}

// Recorded implements Recorder when the backend does; otherwise it returns
// errors.ErrUnsupported. ctx governs the request.
func (c *Client) Recorded(ctx context.Context, name string) (Record, bool, error) {
	rec, err := c.recorder(ctx, "read the record of", name)
	if err != nil {
		return Record{}, false, err
	}
	type found struct {
		r  Record
		ok bool
	}
	f, err := read(c.caller, ctx, func(ctx context.Context) (found, error) {
		r, ok, err := rec.Recorded(ctx, name)
		return found{r, ok}, err
	})
	return f.r, f.ok, errjoin.OneLine(err)
}

// recorder checks a record request before any I/O and returns the
// backend that serves it.
func (c *Client) recorder(ctx context.Context, what, name string) (Recorder, error) {
	if err := c.validName(name); err != nil {
		return nil, err
	}
	rec, ok := c.backend.(Recorder)
	if !ok {
		return nil, fmt.Errorf("dlock: %s %q: %w", what, name, errors.ErrUnsupported)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dlock: %s %q: %w", what, name, err)
	}
	return rec, nil
}

// Watcher is implemented by Lockers whose server pushes changes (etcd and
// ZooKeeper watches): what Inspect and Recorded report of a name changes,
// and Watch says so. election's Observe reads who leads at each change
// where its Locker is a Watcher, and at an interval where it is not.
type Watcher interface {
	// Watch returns a channel that receives after each change of the
	// lock or the record of any of names: a grant, a release, an expiry,
	// a record written. It is buffered and sends never block, so a slow
	// receiver misses repeats, never the last change. Watch returns once
	// the server watches, so a change made after it returns is reported.
	// The channel closes when ctx ends, or when the server's watch ends
	// (a lost connection): watch again then. Names are validated before
	// any I/O.
	Watch(ctx context.Context, names ...string) (<-chan struct{}, error)
}
