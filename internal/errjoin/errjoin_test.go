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

func TestOneLine(t *testing.T) {
	inner := errors.New("failed to connect to `user=u database=d`:\n\t[::1]:1 (localhost): dial error\n\t127.0.0.1:1 (localhost): dial error")
	err := errjoin.OneLine(fmt.Errorf("dlock: acquire %q: %w", "x", inner))
	if got, want := err.Error(), "dlock: acquire \"x\": failed to connect to `user=u database=d`:; [::1]:1 (localhost): dial error; 127.0.0.1:1 (localhost): dial error"; got != want {
		t.Fatalf("OneLine:\n got %q\nwant %q", got, want)
	}
	if !errors.Is(err, inner) {
		t.Fatal("OneLine hides the error it wraps")
	}
	plain := errors.New("one line")
	if errjoin.OneLine(plain) != plain || errjoin.OneLine(nil) != nil {
		t.Fatal("OneLine changed an error with no line break, or nil")
	}
}
