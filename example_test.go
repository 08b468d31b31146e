package dlock_test

import (
	"context"
	"fmt"

	"github.com/dlockhq/dlock"
)

// Do holds a lock for the length of a function, and cancels the function's
// context if the lease is lost meanwhile.
func ExampleDo() {
	var locker dlock.Locker = exampleLocker() // e.g. tablelock.New(db)
	err := dlock.Do(context.Background(), locker, "invoice:42", func(ctx context.Context) error {
		// Work here is protected while ctx is live.
		return nil
	})
	fmt.Println(err)
	// Output: <nil>
}

// A lease's fencing token lets the protected resource refuse a holder that
// lost its lease: store the token with each write and reject smaller ones.
func ExampleLease_Token() {
	locker := exampleLocker()
	ctx := context.Background()
	first, _ := locker.Lock(ctx, "report")
	firstToken := first.Token()
	first.Unlock(ctx)

	second, _ := locker.Lock(ctx, "report")
	defer second.Unlock(ctx)
	fmt.Println(second.Token() > firstToken)
	// Output: true
}

func exampleLocker() dlock.Locker {
	c, err := dlock.NewClient(newMemory())
	if err != nil {
		panic(err)
	}
	return c
}
