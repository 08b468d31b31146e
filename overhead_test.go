package dlock_test

import (
	"context"
	"testing"

	"github.com/dlockhq/dlock/driver"
)

// BenchmarkClientOverhead is Client's own cost of a lock and unlock, over
// an in-process backend: what every backend adds to its server's round
// trips, measured without a network to blur it.
func BenchmarkClientOverhead(b *testing.B) {
	for _, bc := range []struct {
		name string
		mk   func() driver.Backend
	}{
		{"worker", func() driver.Backend { return newMemory() }},
		{"inline", func() driver.Backend { return &bounded{memory: newMemory()} }},
		{"blocking", func() driver.Backend { return blocking{newMemory()} }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := newClient(b, bc.mk())
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.Lock(ctx, "overhead")
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
