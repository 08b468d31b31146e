package redislock_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// serverCalls returns the calls of each command the server has served
// (INFO commandstats), by name: "evalsha", "subscribe", ….
func serverCalls(ctx context.Context, c *redis.Client) (map[string]int64, error) {
	stats, err := c.InfoMap(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	calls := map[string]int64{}
	for cmd, fields := range stats["Commandstats"] {
		var n int64
		if _, err := fmtSscan(fields, &n); err != nil {
			return nil, err
		}
		calls[strings.TrimPrefix(cmd, "cmdstat_")] = n
	}
	return calls, nil
}

// clientCommands sums, of calls (serverCalls), the commands a Locker
// sends: scripts and pub/sub.
func clientCommands(calls map[string]int64) int64 {
	var n int64
	for _, cmd := range []string{"evalsha", "eval", "subscribe", "unsubscribe", "ssubscribe", "sunsubscribe"} {
		n += calls[cmd]
	}
	return n
}

// fmtSscan reads calls=N from a commandstats line.
func fmtSscan(fields string, calls *int64) (int, error) {
	for _, f := range strings.Split(fields, ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			return fmt.Sscan(v, calls)
		}
	}
	return 0, fmt.Errorf("no calls in %q", fields)
}
