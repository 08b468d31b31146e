package redislock_test

import (
	"fmt"
	"strings"
)

// fmtSscan reads calls=N from a commandstats line.
func fmtSscan(fields string, calls *int64) (int, error) {
	for _, f := range strings.Split(fields, ",") {
		if v, ok := strings.CutPrefix(f, "calls="); ok {
			return fmt.Sscan(v, calls)
		}
	}
	return 0, fmt.Errorf("no calls in %q", fields)
}
