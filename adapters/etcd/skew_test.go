package etcdlock_test

import (
	"context"
	"testing"
	"time"

	etcdlock "github.com/dlockhq/dlock/adapters/etcd"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv/etcdenv"
)

// A record's age on etcd is the reading host's clock less the writing
// host's (etcd has no clock a client can read; docs/jobs.md says so): a
// writer whose clock runs S ahead makes the record look S younger, so a
// job's lockAtLeastFor lasts S longer; one running S behind makes it look
// S older, so lockAtLeastFor ends S early. This test pins that cost.
func TestRecordAgeFollowsTheHostsClocks(t *testing.T) {
	c := etcdenv.Client(t, etcdenv.Endpoints())
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	const skew = 10 * time.Second
	for _, tc := range []struct {
		writerSkew time.Duration
		min, max   time.Duration // the age the reader sees
	}{
		{0, 0, 2 * time.Second},
		{skew, 0, 0},                        // from the future: clamped to 0, lockAtLeastFor lasts 10 s longer
		{-skew, skew, skew + 2*time.Second}, // from the past: 10 s old at once, lockAtLeastFor ends 10 s early
	} {
		name := dlocktest.Name(t)
		writer, reader := newLocker(t, c), newLocker(t, c)
		etcdlock.SkewClock(writer, tc.writerSkew)
		lease, err := writer.Lock(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if err := writer.Record(ctx, name, lease.Token(), []byte("ran")); err != nil {
			t.Fatal(err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		r, ok, err := reader.Recorded(ctx, name)
		if err != nil || !ok {
			t.Fatalf("Recorded: %v %v", ok, err)
		}
		if r.Age < tc.min || r.Age > tc.max {
			t.Errorf("writer's clock skewed %v: the reader sees the record %v old, want %v to %v", tc.writerSkew, r.Age, tc.min, tc.max)
		}
	}
}
