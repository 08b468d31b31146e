package redislock_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
)

func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	locker, err := redislock.New(client)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := locker.Lock(ctx, "cart:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	select {
	case <-lease.Done(): // renewal failed or the lock vanished: stop writing
		log.Print(lease.Err())
	default:
	}
}

func ExampleNewRedlock() {
	var clients []redis.UniversalClient
	for _, addr := range []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"} {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1}))
	}
	locker, err := redislock.NewRedlock(clients)
	if err != nil {
		log.Fatal(err)
	}
	_ = locker
}

// A fair lock grants in request order; a release wakes only the next
// waiter.
func ExampleNewFair() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	locker, err := redislock.NewFair(client)
	if err != nil {
		log.Fatal(err)
	}
	_ = locker
}

// At most 10 report jobs at once; a crashed job's permit returns after
// its lease.
func ExampleNewSemaphore() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	sem, err := redislock.NewSemaphore(client, "report-jobs", 10, dlock.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	permit, err := sem.Acquire(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	defer permit.Release(ctx)
}

// Many readers or one writer; the writer may downgrade.
func ExampleNewReadWrite() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	rw, err := redislock.NewReadWrite(client)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := rw.Read.Lock(ctx, "catalog")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
}
