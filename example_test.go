package dlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock"
)

// Do holds a lock while fn runs, hands fn the lease and cancels fn's
// context if the lease is lost meanwhile. Every write carries the lease's
// fencing token, so the resource refuses a writer whose lease ran out: in
// SQL, UPDATE invoices SET status = $1, fence = $2 WHERE id = $3 AND
// fence <= $2. One Locker serves every goroutine (an HTTP handler's,
// say): they exclude each other.
func ExampleDo() {
	locker := exampleLocker() // e.g. tablelock.New(db), once at start-up
	invoice := &fencedRecord{}
	err := dlock.Do(context.Background(), locker, "invoice:42", func(ctx context.Context, lease dlock.Lease) error {
		return invoice.write(lease.Token(), "paid")
	})
	fmt.Println(err, invoice.value)

	// A holder whose lease ran out, still holding an older token, is refused.
	fmt.Println(invoice.write(invoice.fence-1, "refunded"))
	// Output:
	// <nil> paid
	// stale token: the lease that wrote it had ended
}

// fencedRecord stands for a row with a fence column.
type fencedRecord struct {
	fence uint64
	value string
}

func (r *fencedRecord) write(token uint64, v string) error {
	if token < r.fence {
		return errors.New("stale token: the lease that wrote it had ended")
	}
	r.fence, r.value = token, v
	return nil
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

// LockWith sets one call apart: this hold's TTL, how long to wait, and a
// payload (who holds the lock and why) that Inspect, List and `dlock ls`
// show while it is held.
func ExampleLockWith() {
	ctx := context.Background()
	locker := exampleLocker() // e.g. tablelock.New(db), once at start-up
	lease, err := dlock.LockWith(ctx, locker, "deploy:api",
		dlock.LockTTL(2*time.Minute), dlock.WaitAtMost(10*time.Second), dlock.WithPayload("deploy #4312 by alice"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Unlock(ctx)
	h, _, _ := locker.(dlock.Inspector).Inspect(ctx, "deploy:api")
	fmt.Println(h.Payload)

	// Another call chain waits at most 10ms for it.
	_, err = dlock.LockWith(ctx, locker, "deploy:api", dlock.WaitAtMost(10*time.Millisecond))
	fmt.Println(errors.Is(err, dlock.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded))
	// Output:
	// deploy #4312 by alice
	// true true
}
