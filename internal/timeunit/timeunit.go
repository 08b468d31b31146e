// Package timeunit converts between durations and the whole units that
// servers take (milliseconds for Redis's PEXPIRE and PostgreSQL's
// timeouts, seconds for MySQL's), without overflowing at either end: a
// lease's TTL may be as long as time.Duration allows.
package timeunit

import (
	"math"
	"time"
)

// Ceil returns d in whole units, rounded up and at least 1, so that a
// server's expiry is never earlier than the client's. unit must be
// positive.
func Ceil(d, unit time.Duration) int64 {
	n := int64(d / unit)
	if d%unit > 0 {
		n++
	}
	return max(1, n)
}

// Of returns n units as a duration, or the longest duration when that
// does not fit. unit must be positive.
func Of(n int64, unit time.Duration) time.Duration {
	if n > int64(math.MaxInt64/unit) {
		return math.MaxInt64
	}
	if n < int64(math.MinInt64/unit) {
		return math.MinInt64
	}
	return time.Duration(n) * unit
}

// AgeOfUnixMilli is how long before now the wall-clock time at (ms since
// the Unix epoch, a server's clock) was, or 0 for a time after now. It
// compares wall clocks, so it is for what dlock reports (a holder's age),
// never for a lease, which the lease code keeps off the wall clock.
func AgeOfUnixMilli(at int64, now time.Time) time.Duration {
	return max(now.Sub(time.UnixMilli(at)), 0)
}
