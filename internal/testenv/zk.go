package testenv

import (
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// ZK connects to ZooKeeper at addrs with the given session timeout and
// waits for the session; t.Cleanup closes it.
func ZK(t testing.TB, addrs []string, sessionTimeout time.Duration) *zk.Conn {
	t.Helper()
	conn, events, err := zk.Connect(addrs, sessionTimeout, zk.WithLogger(quietLogger{}))
	if err != nil {
		Unavailable(t, "ZooKeeper", strings.Join(addrs, ","), "DLOCK_ZK_ADDRS", err)
	}
	stop := make(chan struct{})
	t.Cleanup(func() {
		conn.Close()
		close(stop)
	})
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				go func() { // keep the channel drained until the clean-up
					for {
						select {
						case _, ok := <-events:
							if !ok {
								return
							}
						case <-stop:
							return
						}
					}
				}()
				return conn
			}
		case <-deadline:
			conn.Close()
			Unavailable(t, "ZooKeeper session", strings.Join(addrs, ","), "DLOCK_ZK_ADDRS", zk.ErrNoServer)
		}
	}
}
