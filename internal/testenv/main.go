package testenv

import (
	"testing"

	"go.uber.org/goleak"
)

// Main runs a package's tests (call it from TestMain) and then fails the
// run if any goroutine is still running: every Locker, client, pool and
// server a test started must have been closed by its clean-ups.
//
// Two goroutines are let go, both the client libraries' own:
//   - go-redis probes a server it could not dial again once a second, and
//     a probe begun before its pool closed sleeps out that second before
//     it sees the pool closed and ends;
//   - go-zookeeper v1.0.4 wedges a connection's loop for good when, on a
//     reconnect, writing its set-watches or auth request fails: the
//     request's one-slot reply channel gets the write error, and the
//     loop then blocks sending it a second error in flushRequests
//     (go-zookeeper/zk pull request 163). A leader killed under a client
//     with watches set can do it; Close returns, the goroutine stays.
//
// And one of toxiproxy's, which the fault suite's proxies run on: its
// pass-through stage sends each chunk on without watching for the link's
// end (toxics.NoopToxic.Pipe), so a chunk read as a toxic is added to a
// link whose far side then closes (a worker killed, a proxy stopped)
// leaves it blocked for good. Its latency stage and the link's writer
// (toxics.LatencyToxic.Pipe, stream.ChanReader.Read) can be left the same
// way when the slow-server suite removes its latency while a link closes:
// the stage that fed them was interrupted and never closes their input.
func Main(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
		goleak.IgnoreTopFunction("github.com/go-zookeeper/zk.(*Conn).flushRequests"),
		goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"),
		goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*LatencyToxic).Pipe"),
		goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/stream.(*ChanReader).Read"),
	)
}
