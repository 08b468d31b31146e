package schedlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/memlock"
	"github.com/dlockhq/dlock/schedlock"
)

// Every node calls Run when its schedule fires; one of them runs the
// nightly report, the others skip it. On memlock's in-memory server here;
// see ExampleNew for the Redis one.
func Example() {
	ctx := context.Background()
	locker, err := memlock.NewLocker(memlock.NewServer(), dlock.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(ctx)
	runner, err := schedlock.New(locker)
	if err != nil {
		log.Fatal(err)
	}

	report := func(ctx context.Context, token uint64) error {
		// The job: stops when ctx is cancelled, fences its writes with
		// token.
		return schedlock.Assert(ctx)
	}
	const name = "reports/nightly"
	err = runner.Run(ctx, name, report, 10*time.Minute, 30*time.Second)
	fmt.Println("first node:", err)
	// A node whose schedule fired a moment later finds the slot closed.
	err = runner.Run(ctx, name, report, 10*time.Minute, 30*time.Second)
	fmt.Println("second node skipped:", errors.Is(err, schedlock.ErrSkipped))
	// Output:
	// first node: <nil>
	// second node skipped: true
}

// A Runner on the local Redis (make services): every node makes one on
// its own Locker of the same servers.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker, err := redislock.New(client, dlock.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(context.Background())
	runner, err := schedlock.New(locker) // lockAtMostFor of its runs: 1 minute or more
	if err != nil {
		log.Fatal(err)
	}
	_ = runner
}
