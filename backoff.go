package dlock

import (
	"math/rand/v2"
	"time"
)

// Backoff returns how long to wait before retry number attempt (0 for the
// first retry). It is a pure function of the attempt, so one Backoff can be
// shared by any number of concurrent callers.
type Backoff func(attempt int) time.Duration

// ExponentialBackoff returns a Backoff with "full jitter": a uniformly random
// delay between 0 and min(max, base·2^attempt). Jitter keeps waiters that
// started together from retrying together. A base of 0 or less counts as
// 1ms, and a max below base as base.
func ExponentialBackoff(base, max time.Duration) Backoff {
	if base <= 0 {
		base = time.Millisecond
	}
	if max < base {
		max = base
	}
	return func(attempt int) time.Duration {
		d := max
		if attempt >= 0 && attempt < 63 && base <= max>>attempt {
			d = base << attempt
		}
		return time.Duration(rand.Int64N(int64(d)) + 1)
	}
}
