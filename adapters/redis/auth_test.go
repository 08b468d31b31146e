package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// The caller's client carries authentication: a Locker on a client with
// the password locks; one without gets the server's refusal (not "held by
// another owner"), and no error carries the password.
func TestAuthPassesThrough(t *testing.T) {
	server := testenv.RedisServers(t, 1)[0]
	const password = "s3cret-pass"
	if err := client(t, server.Addr).ConfigSet(context.Background(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	authed := redis.NewClient(&redis.Options{Addr: server.Addr, Password: password})
	t.Cleanup(func() { authed.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	lease, err := newLocker(t, authed).Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Unlock(ctx)

	for _, pw := range []string{"", "wrong-" + password} {
		c := redis.NewClient(&redis.Options{Addr: server.Addr, Password: pw})
		t.Cleanup(func() { c.Close() })
		_, err := newLocker(t, c).TryLock(ctx, name)
		if err == nil || errors.Is(err, dlock.ErrNotAcquired) {
			t.Errorf("TryLock with password %q: %v, want the server's refusal", pw, err)
		}
		if err != nil && strings.Contains(err.Error(), password) {
			t.Errorf("error carries the password: %v", err)
		}
	}
}
