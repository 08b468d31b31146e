package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
)

// CancelSoon returns a context cancelled 50ms from now, and when it was.
// With CheckWithinMargin it tells whether a call honours a cancellation
// its backend does not watch.
func CancelSoon() (context.Context, <-chan time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	cancelled := make(chan time.Time, 1)
	time.AfterFunc(50*time.Millisecond, func() {
		cancelled <- time.Now()
		cancel()
	})
	return ctx, cancelled
}

// CheckWithinMargin fails t when what returned (at returned) later than
// dlock.CancelMargin, with a second for a loaded machine, after its ctx
// was cancelled (CancelSoon's time).
func CheckWithinMargin(t testing.TB, what string, returned time.Time, cancelled <-chan time.Time) {
	t.Helper()
	if late := returned.Sub(<-cancelled); late > dlock.CancelMargin+time.Second {
		t.Fatalf("%s returned %v after its ctx was cancelled; the margin is %v", what, late, dlock.CancelMargin)
	}
}
