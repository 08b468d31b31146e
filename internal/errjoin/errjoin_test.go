package errjoin_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dlockhq/dlock/internal/errjoin"
)

func TestJoin(t *testing.T) {
	a, b := errors.New("a failed"), context.DeadlineExceeded
	err := errjoin.Join(a, nil, b)
	if !errors.Is(err, a) || !errors.Is(err, b) {
		t.Fatalf("Join lost a part: %v", err)
	}
	if got := err.Error(); got != "a failed; context deadline exceeded" {
		t.Fatalf("Error() = %q", got)
	}
	if errjoin.Join(nil, nil) != nil {
		t.Fatal("Join of nils is not nil")
	}
	if errjoin.Join(a) != a {
		t.Fatal("Join of one error wrapped it")
	}
}

func Example() {
	fmt.Println(errjoin.Join(errors.New("dlock: lock not acquired"), context.Canceled))
	// Output: dlock: lock not acquired; context canceled
}
