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
	_ dlock.Recorder = (*Locker)(nil)
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
	cmd, unconfirmed := runReplicated(ctx, c, b.replicas, b.wait, recordWriteScript,
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

// Recorded implements dlock.Recorder.
func (b *backend) Recorded(ctx context.Context, name string) (dlock.Record, bool, error) {
	res, err := recordReadScript.Run(ctx, b.client, []string{keysFor(name).record()}).Slice()
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
