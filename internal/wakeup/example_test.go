package wakeup_test

import (
	"fmt"

	"github.com/dlockhq/dlock/internal/wakeup"
)

// A release frees an exclusive lock for one waiter: WakeOne wakes the
// longest waiting, and a waiter that leaves with a wake-up pending passes
// it on.
func ExampleHub_WakeOne() {
	var hub wakeup.Hub
	first, leave := hub.Add("orders")
	second, _ := hub.Add("orders")
	hub.WakeOne("orders")
	fmt.Println(len(first), len(second))
	leave()
	fmt.Println(len(second))
	// Output:
	// 1 0
	// 1
}
