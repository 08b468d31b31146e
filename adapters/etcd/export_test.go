package etcdlock

import (
	"context"
	"time"

	"github.com/dlockhq/dlock/driver"
)

// ReleaseLate is a release of owner's hold of name with token, made late
// (a retry after the hold was released, or an attempt's clean-up), as the
// Client would make it: by the owner's key.
func ReleaseLate(ctx context.Context, l *Locker, name, owner string, token uint64) error {
	return l.b.Release(ctx, driver.Hold{Name: name, Owner: owner, Token: token})
}

// SkewClock makes l's host clock run skew ahead of the real one (behind,
// for a negative skew), for records' ages.
func SkewClock(l *Locker, skew time.Duration) {
	l.b.now = func() time.Time { return time.Now().Add(skew) }
}
