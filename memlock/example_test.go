package memlock_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/memlock"
)

// A unit test of code that must stop when its lock is lost: the test
// expires the lease while the code runs.
func Example() {
	server := memlock.NewServer()
	locker, err := memlock.NewLocker(server)
	if err != nil {
		panic(err)
	}
	defer locker.Close(context.Background())

	err = dlock.Do(context.Background(), locker, "invoice:42", func(ctx context.Context, lease dlock.Lease) error {
		server.Expire("invoice:42") // what the test injects
		<-ctx.Done()                // the code under test stops here
		return ctx.Err()
	})
	fmt.Println(errors.Is(err, dlock.ErrLost))
	// Output: true
}
