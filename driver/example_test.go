package driver_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/driver"
)

// table is a toy lock server in the process: one owner per name and a
// counter for tokens. A real backend talks to a server.
type table struct {
	mu      sync.Mutex
	holders map[string]string
	token   uint64
}

var _ driver.Backend = (*table)(nil)

func (t *table) Acquire(_ context.Context, r driver.Request) (driver.Grant, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if owner, held := t.holders[r.Name]; held && owner != r.Owner {
		return driver.Grant{}, nil // held by another owner: Client waits and tries again
	}
	t.holders[r.Name] = r.Owner
	t.token++
	return driver.Grant{Acquired: true, Token: t.token}, nil
}

func (t *table) Refresh(_ context.Context, h driver.Hold) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holders[h.Name] != h.Owner {
		return fmt.Errorf("%w: %s", dlock.ErrNotHeld, h.Name)
	}
	return nil
}

func (t *table) Release(_ context.Context, h driver.Hold) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holders[h.Name] != h.Owner {
		return fmt.Errorf("%w: %s", dlock.ErrNotHeld, h.Name)
	}
	delete(t.holders, h.Name)
	return nil
}

// A backend supplies single attempts; dlock.NewClient adds waiting,
// renewal, the lease's deadline and its loss.
func Example() {
	locker, err := dlock.NewClient(&table{holders: map[string]string{}}, dlock.WithTTL(time.Second))
	if err != nil {
		panic(err)
	}
	defer locker.Close(context.Background())
	ctx := context.Background()
	lease, err := locker.Lock(ctx, "report")
	if err != nil {
		panic(err)
	}
	fmt.Println("token", lease.Token())
	if err := lease.Unlock(ctx); err != nil {
		panic(err)
	}
	// Output: token 1
}
