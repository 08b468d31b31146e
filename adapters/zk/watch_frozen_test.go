package zklock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// Watch on a frozen server returns by its ctx's deadline (plus
// dlock.CancelMargin), though go-zookeeper's requests take no ctx.
func TestWatchOnFrozenServer(t *testing.T) {
	proxy := testenv.NewProxy(t, testenv.ZKAddrs(t)[0])
	l := newLocker(t, testenv.ZK(t, []string{proxy.Addr()}, 4*time.Second))
	proxy.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := l.Watch(ctx, dlocktest.Name(t)); err == nil {
		t.Fatal("Watch on a frozen server succeeded")
	}
	if took := time.Since(start); took > 500*time.Millisecond+dlock.CancelMargin {
		t.Fatalf("Watch with a ctx of 500ms on a frozen server returned after %v", took)
	}
}
