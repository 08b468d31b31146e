package zklock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Used for many names, every Lock succeeds, and a name leaves no node
// behind once unlocked: its directory is a container node, which the
// server deletes at its container check (scripts/services.sh sets it to
// every second; a minute by default).
func TestManyDistinctNames(t *testing.T) {
	conn := testenv.ZK(t, testenv.ZKAddrs(t), 4*time.Second)
	l := newLocker(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	prefix := dlocktest.Name(t) + "."
	n := testenv.DistinctNames(t, 1_000)
	testenv.LockDistinct(t, ctx, l, prefix, n)
	escaped := escapeName(prefix)
	left := func() int {
		children, _, err := conn.Children(root)
		if err != nil {
			t.Fatal(err)
		}
		count := 0
		for _, c := range children {
			if strings.HasPrefix(c, escaped) {
				count++
			}
		}
		return count
	}
	dlocktest.Eventually(t, func() bool { return left() == 0 }, fmt.Sprintf("the directories of %d unlocked names gone (%d left)", n, left()))
}
