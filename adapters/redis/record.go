package redislock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errjoin"
	"github.com/dlockhq/dlock/internal/timeunit"
)

var (
	//go:embed scripts/record_write.lua
	recordWriteSrc string
	//go:embed scripts/record_read.lua
	recordReadSrc string

	recordWriteScript = redis.NewScript(recordWriteSrc)
	recordReadScript  = redis.NewScript(recordReadSrc)
)

var (
	_ dlock.Recorder = (*backend)(nil)
	_ dlock.Recorder = (*rwBackend)(nil)
	_ dlock.Recorder = (*redlockBackend)(nil)
	_ dlock.Recorder = (*Locker)(nil)
	_ dlock.Recorder = (*Redlock)(nil)
)

// Record implements dlock.Recorder: the record is a hash beside the
// name's lock keys (the same cluster slot), written by one script that
// compares tokens on the server, and acknowledged by the replicas
// WithReplicas asks for. Records do not expire: there is one per
// election or scheduled job.
func (b *backend) Record(ctx context.Context, name string, token uint64, value []byte) error {
	c, err := b.master(ctx, name)
	if err != nil {
		return err
	}
	return recordOn(ctx, c, b.replicas, b.wait, name, token, value)
}

// Recorded implements dlock.Recorder.
func (b *backend) Recorded(ctx context.Context, name string) (dlock.Record, bool, error) {
	return recordedOn(ctx, b.client, name)
}

// Record implements dlock.Recorder, as New's Locker does: a read-write
// lock's record is the name's record.
func (b *rwBackend) Record(ctx context.Context, name string, token uint64, value []byte) error {
	return recordOn(ctx, b.client, 0, 0, name, token, value)
}

// Recorded implements dlock.Recorder.
func (b *rwBackend) Recorded(ctx context.Context, name string) (dlock.Record, bool, error) {
	return recordedOn(ctx, b.client, name)
}

// Record implements dlock.Recorder on a quorum: the write must reach a
// majority of the servers; it is stale when so many refuse it that no
// majority can take it.
func (b *redlockBackend) Record(ctx context.Context, name string, token uint64, value []byte) error {
	errs := b.each(ctx, recordTimeout, func(ctx context.Context, _ int, c redis.UniversalClient) error {
		return recordOn(ctx, c, 0, 0, name, token, value)
	})
	return b.quorumResult(fmt.Sprintf("record %q, token %d", name, token), errs, dlock.ErrStale)
}

// Recorded implements dlock.Recorder: the record with the largest token
// a majority of the servers answered with (the youngest, where they
// differ in age).
func (b *redlockBackend) Recorded(ctx context.Context, name string) (dlock.Record, bool, error) {
	recs := make([]dlock.Record, len(b.clients))
	found := make([]bool, len(b.clients))
	errs := b.each(ctx, recordTimeout, func(ctx context.Context, i int, c redis.UniversalClient) (err error) {
		recs[i], found[i], err = recordedOn(ctx, c, name)
		return err
	})
	answered := 0
	var best dlock.Record
	var have bool
	for i, err := range errs {
		if err != nil {
			continue
		}
		answered++
		if r := recs[i]; found[i] && (!have || r.Token > best.Token || r.Token == best.Token && r.Age < best.Age) {
			best, have = r, true
		}
	}
	if answered < b.quorum {
		return dlock.Record{}, false, fmt.Errorf("redislock: Redlock: record %q: %d of %d servers answered: %w", name, answered, len(b.clients), errjoin.Join(errs...))
	}
	return best, have, nil
}

// recordOn writes name's record on c (and waits for its replicas).
func recordOn(ctx context.Context, c redis.Scripter, replicas int, wait time.Duration, name string, token uint64, value []byte) error {
	cmd, unconfirmed := runReplicated(ctx, c, replicas, wait, recordWriteScript,
		[]string{keysFor(name).record()}, token, value)
	written, err := cmd.Int64()
	switch {
	case err != nil:
		return err
	case written == 0:
		return fmt.Errorf("%w: record %q, token %d", dlock.ErrStale, name, token)
	}
	return unconfirmed
}

// recordedOn reads name's record on c.
func recordedOn(ctx context.Context, c redis.Scripter, name string) (dlock.Record, bool, error) {
	res, err := recordReadScript.Run(ctx, c, []string{keysFor(name).record()}).Slice()
	if errors.Is(err, redis.Nil) {
		return dlock.Record{}, false, nil
	}
	if err != nil {
		return dlock.Record{}, false, err
	}
	if len(res) != 3 {
		return dlock.Record{}, false, fmt.Errorf("redislock: record %q: malformed reply %v", name, res)
	}
	token, err1 := strconv.ParseUint(fmt.Sprint(res[0]), 10, 64)
	value, ok := res[1].(string)
	age, ok2 := res[2].(int64)
	if err1 != nil || !ok || !ok2 {
		return dlock.Record{}, false, fmt.Errorf("redislock: record %q: malformed reply %v", name, res)
	}
	return dlock.Record{Value: []byte(value), Token: token, Age: timeunit.Of(age, time.Microsecond)}, true, nil
}

// recordTimeout is what Redlock's record requests pass as the TTL to
// each: each server's reply is bounded by serverTimeout of it.
const recordTimeout = 5 * time.Second
