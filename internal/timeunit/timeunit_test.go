package timeunit

import (
	"math"
	"testing"
	"time"
)

func TestCeil(t *testing.T) {
	for _, c := range []struct {
		d, unit time.Duration
		want    int64
	}{
		{0, time.Millisecond, 1},
		{-time.Second, time.Millisecond, 1},
		{time.Nanosecond, time.Millisecond, 1},
		{time.Millisecond, time.Millisecond, 1},
		{time.Millisecond + 1, time.Millisecond, 2},
		{30 * time.Second, time.Millisecond, 30000},
		{1500 * time.Millisecond, time.Second, 2},
		// The longest TTL: the sum a rounding up by addition makes would
		// wrap around to a negative number.
		{math.MaxInt64, time.Millisecond, 9223372036855},
		{math.MaxInt64, time.Second, 9223372037},
		{math.MaxInt64, time.Microsecond, 9223372036854776},
	} {
		if got := Ceil(c.d, c.unit); got != c.want {
			t.Errorf("Ceil(%d, %v) = %d, want %d", int64(c.d), c.unit, got, c.want)
		}
	}
}

func TestOf(t *testing.T) {
	for _, c := range []struct {
		n    int64
		unit time.Duration
		want time.Duration
	}{
		{0, time.Millisecond, 0},
		{30000, time.Millisecond, 30 * time.Second},
		{-5, time.Second, -5 * time.Second},
		{9223372036854, time.Millisecond, 9223372036854 * time.Millisecond},
		{9223372036855, time.Millisecond, math.MaxInt64},
		{math.MaxInt64, time.Second, math.MaxInt64},
		{math.MinInt64, time.Second, math.MinInt64},
	} {
		if got := Of(c.n, c.unit); got != c.want {
			t.Errorf("Of(%d, %v) = %d, want %d", c.n, c.unit, int64(got), int64(c.want))
		}
	}
}

func TestAgeOfUnixMilli(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	for _, c := range []struct {
		at   int64
		want time.Duration
	}{{1_000_000, 0}, {999_000, time.Second}, {1_000_500, 0}} {
		if got := AgeOfUnixMilli(c.at, now); got != c.want {
			t.Errorf("AgeOfUnixMilli(%d) = %v, want %v", c.at, got, c.want)
		}
	}
}
