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
	"github.com/dlockhq/dlock/schedlock"
)

// Every node calls Run when its schedule fires; one of them runs the
// nightly report, the others skip it.
func Example() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	locker, err := redislock.New(client, dlock.WithTTL(time.Minute))
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
	name := fmt.Sprintf("example/nightly-report/%d", time.Now().UnixNano())
	err = runner.Run(ctx, name, report, 10*time.Minute, 30*time.Second)
	fmt.Println("first node:", err)
	// A node whose schedule fired a moment later finds the slot closed.
	err = runner.Run(ctx, name, report, 10*time.Minute, 30*time.Second)
	fmt.Println("second node skipped:", errors.Is(err, schedlock.ErrSkipped))
	// Output:
	// first node: <nil>
	// second node skipped: true
}
