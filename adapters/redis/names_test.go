package redislock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Used for many names, every Lock succeeds, and a name leaves one key
// behind once unlocked, its fencing counter, which expires on its own a
// day after its last token: nothing stays for good.
func TestManyDistinctNames(t *testing.T) {
	c := client(t, testenv.RedisAddr(t))
	l := newLocker(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	prefix := dlocktest.Name(t) + "."
	n := testenv.DistinctNames(t, 5_000)
	testenv.LockDistinct(t, ctx, l, prefix, n)
	keys, err := c.Keys(ctx, "dlock:{"+prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), keys...) })
	if len(keys) > n {
		t.Errorf("%d keys left by %d unlocked names, want one each at most", len(keys), n)
	}
	for _, k := range keys {
		if !strings.HasSuffix(k, ":fence") {
			t.Errorf("key %q left behind by an unlocked name", k)
			continue
		}
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 || ttl > 24*time.Hour {
			t.Errorf("fencing counter %q expires in %v, want within a day", k, ttl)
		}
	}
	t.Logf("%d names: %d keys left, each expiring within a day", n, len(keys))
}
