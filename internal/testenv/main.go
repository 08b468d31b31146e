package testenv

import (
	"testing"

	"go.uber.org/goleak"
)

// Main runs a package's tests (call it from TestMain) and then fails the
// run if any goroutine is still running: every Locker, client, pool and
// server a test started must have been closed by its clean-ups.
//
// One goroutine is let go: go-redis probes a server it could not dial
// again once a second, and a probe begun before its pool closed sleeps
// out that second before it sees the pool closed and ends.
func Main(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
