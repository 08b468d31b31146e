package schedlock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memlock"
	"github.com/dlockhq/dlock/schedlock"
)

func runner(t *testing.T, ttl time.Duration) *schedlock.Runner {
	t.Helper()
	l, err := memlock.NewLocker(memlock.NewServer(), dlock.WithTTL(ttl))
	if err != nil {
		t.Fatalf("memlock.NewLocker with WithTTL(%v): %v", ttl, err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	r, err := schedlock.New(l)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The advice of a lockAtMostFor shorter than the Locker's TTL works when
// followed: a Locker WithTTL(lockAtMostFor) accepts the job. Below
// dlock.MinTTL no Locker can, and the error says so instead of advising
// a TTL that dlock refuses.
func TestValidateAdviceWorks(t *testing.T) {
	r := runner(t, time.Minute)
	err := r.Validate("job", time.Second, 0)
	if err == nil || !strings.Contains(err.Error(), "WithTTL(1s)") {
		t.Fatalf("Validate(lockAtMostFor 1s) on a 1m TTL: %v, want the advice WithTTL(1s)", err)
	}
	if err := runner(t, time.Second).Validate("job", time.Second, 0); err != nil {
		t.Fatalf("following the advice: %v", err)
	}

	short := dlock.MinTTL / 2
	err = r.Validate("job", short, 0)
	if err == nil || strings.Contains(err.Error(), "WithTTL(") || !strings.Contains(err.Error(), "MinTTL") {
		t.Fatalf("Validate(lockAtMostFor %v): %v, want an error naming dlock.MinTTL and no WithTTL advice", short, err)
	}
	if err := runner(t, dlock.MinTTL).Validate("job", dlock.MinTTL, 0); err != nil {
		t.Fatalf("following the advice (lockAtMostFor %v): %v", dlock.MinTTL, err)
	}
}
