package faults_test

import (
	"fmt"
	"time"

	"github.com/dlockhq/dlock/faults"
)

// Client 0's lease ran out (its Done closed at 2); client 1 got the lock
// after that with a larger token, and client 0's Unlock said the lease
// was lost.
func ExampleCheck() {
	history := []faults.Op{
		{Client: 0, Kind: faults.Acquire, Call: 0, Return: 1, Outcome: faults.OK, Token: 7},
		{Client: 1, Kind: faults.Acquire, Call: 1, Return: 5, Outcome: faults.OK, Token: 8},
		{Client: 1, Kind: faults.Release, Call: 6, Return: 7, Outcome: faults.OK},
		{Client: 0, Kind: faults.Release, Call: 8, Return: 9, Outcome: faults.Lost, Done: 2},
	}
	fmt.Println(faults.Check(history, time.Second).OK())

	// Had client 0 seen its Done close only after client 1's Lock
	// returned, two clients would have held the lock at once, even though
	// its Unlock then reported the loss.
	history[3].Done = 6
	fmt.Println(faults.Check(history, time.Second).OK())
	// Output:
	// true
	// false
}
