package zklock_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// distinctNames is how many names TestManyDistinctNames locks:
// DLOCK_DISTINCT_NAMES, or 1,000 (the figure is 200,000).
func distinctNames(t *testing.T) int {
	if s := os.Getenv("DLOCK_DISTINCT_NAMES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("DLOCK_DISTINCT_NAMES=%q: want a positive count", s)
		}
		return n
	}
	return 1_000
}

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
	n := distinctNames(t)
	for i := range n {
		lease, err := l.Lock(ctx, prefix+strconv.Itoa(i))
		if err != nil {
			t.Fatalf("Lock of distinct name %d of %d: %v", i+1, n, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatalf("Unlock of distinct name %d of %d: %v", i+1, n, err)
		}
	}
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
