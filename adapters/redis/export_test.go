package redislock

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock/driver"
)

// FairBackend is the fair lock's backend, driven directly by tests.
type FairBackend interface {
	driver.Backend
	driver.Leaver
}

// NewFairBackend returns a fair lock's backend on c, and what gives back
// its share of c's notifier.
func NewFairBackend(c redis.UniversalClient, queueTimeout time.Duration) (FairBackend, func()) {
	n := notifierFor(c)
	return newFairBackend(c, n, queueTimeout), func() { _ = n.release() }
}

// BoundsCalls is what New's backend on c, waiting for replicas, tells
// dlock about its calls' deadlines (driver.DeadlineBound).
func BoundsCalls(c redis.UniversalClient, replicas int) bool {
	return (&backend{client: c, replicas: replicas}).BoundsCalls()
}
