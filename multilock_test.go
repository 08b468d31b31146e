package dlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
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

// identified is a memory backend with an identity, as two servers are.
type identified struct {
	*memory
	id string
}

func (b identified) Identity() string { return b.id }

// One name on two servers, asked for in opposite orders by two callers:
// both take the parts in the same order (no deadlock), whatever order the
// caller gave; parts the order cannot tell apart are refused; the same
// part twice is taken once.
func TestMultiLockCanonicalOrder(t *testing.T) {
	one := newClient(t, identified{newMemory(), "server-1"}, dlock.WithOwner("one"))
	two := newClient(t, identified{newMemory(), "server-2"}, dlock.WithOwner("two"))
	ctx := context.Background()
	order := func(parts ...dlock.Part) []string {
		all, err := dlock.LockAll(ctx, parts...)
		if err != nil {
			t.Fatal(err)
		}
		defer all.Unlock(ctx)
		var ids []string
		for _, l := range all.Leases() {
			label, _, _ := strings.Cut(l.Owner(), "#")
			ids = append(ids, label)
		}
		return ids
	}
	p1, p2 := dlock.Part{Locker: two, Name: "x"}, dlock.Part{Locker: one, Name: "x"}
	if a, b := order(p1, p2), order(p2, p1); !slices.Equal(a, b) || len(a) != 2 {
		t.Fatalf("parts taken as %v and as %v", a, b)
	}
	twin := newClient(t, identified{newMemory(), "server-1"})
	if _, err := dlock.LockAll(ctx, dlock.Part{Locker: one, Name: "x"}, dlock.Part{Locker: twin, Name: "x"}); err == nil {
		t.Fatal("parts that no order tells apart were accepted")
	}
	all, err := dlock.TryLockAll(ctx, dlock.Part{Locker: one, Name: "y"}, dlock.Part{Locker: one, Name: "y"})
	if err != nil {
		t.Fatalf("the same part twice: %v", err)
	}
	all.Unlock(ctx)

	// A Locker wrapper that cannot be compared is not known to be one
	// Locker: refused, where comparing would panic.
	w := labelled{Locker: one, labels: []string{"a"}}
	if _, err := dlock.TryLockAll(ctx, dlock.Part{Locker: w, Name: "z"}, dlock.Part{Locker: w, Name: "z"}); err == nil {
		t.Fatal("two parts of an uncomparable Locker that no order tells apart were accepted")
	}
}

// labelled is a Locker wrapper passed by value that cannot be compared.
type labelled struct {
	dlock.Locker
	labels []string
}
