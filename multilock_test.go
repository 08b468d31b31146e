package dlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlockhq/dlock"
)

func TestMultiLockRollsBack(t *testing.T) {
	m := newMemory()
	a, other := newClient(t, m), newClient(t, m)
	ctx := context.Background()
	held, err := other.Lock(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	_, err = dlock.TryLockAll(ctx, dlock.Part{Locker: a, Name: "c"}, dlock.Part{Locker: a, Name: "b"}, dlock.Part{Locker: a, Name: "a"})
	if !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("TryLockAll with b taken: %v, want ErrNotAcquired", err)
	}
	// a was taken before b failed; it must be free again.
	if _, held, _ := m.Inspect(ctx, "a"); held {
		t.Fatal("TryLockAll left part a held after failing on b")
	}
	held.Unlock(ctx)
	all, err := dlock.TryLockAll(ctx, dlock.Part{Locker: a, Name: "b"}, dlock.Part{Locker: a, Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if all.Name() != "a+b" {
		t.Fatalf("parts taken in order %q, want a+b", all.Name())
	}
	// Losing one part ends the whole lease.
	m.stolen("b")
	all.Leases()[1].Refresh(ctx)
	<-all.Done()
	if !errors.Is(all.Err(), dlock.ErrLost) {
		t.Fatalf("Err() = %v, want ErrLost", all.Err())
	}
	if err := all.Unlock(ctx); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("Unlock with a lost part = %v, want ErrNotHeld for it", err)
	}
}

func TestMultiLockBadInput(t *testing.T) {
	ctx := context.Background()
	if _, err := dlock.LockAll(ctx); err == nil {
		t.Error("no parts accepted")
	}
	if _, err := dlock.LockAll(ctx, dlock.Part{Name: "x"}); err == nil {
		t.Error("nil Locker accepted")
	}
	c := newClient(t, newMemory())
	if _, err := dlock.LockAll(ctx, dlock.Part{Locker: c, Name: ""}); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("empty name: %v", err)
	}
}
