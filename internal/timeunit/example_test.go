package timeunit_test

import (
	"fmt"
	"math"
	"time"

	"github.com/dlockhq/dlock/internal/timeunit"
)

// A TTL goes to the server in whole milliseconds, rounded up, and a
// server's milliseconds come back as a duration.
func Example() {
	fmt.Println(timeunit.Ceil(1500*time.Microsecond, time.Millisecond))
	fmt.Println(timeunit.Ceil(math.MaxInt64, time.Millisecond))
	fmt.Println(timeunit.Of(1500, time.Millisecond))
	fmt.Println(timeunit.Of(math.MaxInt64, time.Millisecond) == math.MaxInt64)
	// Output:
	// 2
	// 9223372036855
	// 1.5s
	// true
}
