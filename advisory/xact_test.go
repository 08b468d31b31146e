package advisory_test

import (
	"context"
	"errors"
	"testing"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

func TestTransactionScoped(t *testing.T) {
	db := migrated(t, testenv.Postgres)
	ctx := context.Background()
	name := dlocktest.Name(t)
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	first, err := advisory.LockTx(ctx, tx1, name)
	if err != nil {
		t.Fatal(err)
	}
	if h, held, err := newLocker(t, db).Inspect(ctx, name); err != nil || !held || h.Token != first || h.Owner != advisory.TxOwner {
		t.Fatalf("Inspect while tx holds: %+v held=%v err=%v", h, held, err)
	}
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx2.Rollback()
	if _, ok, err := advisory.TryLockTx(ctx, tx2, name); err != nil || ok {
		t.Fatalf("TryLockTx while another tx holds: ok=%v err=%v", ok, err)
	}
	if _, err := newLocker(t, db).TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("session TryLock while a tx holds: %v, want ErrNotAcquired", err)
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	second, ok, err := advisory.TryLockTx(ctx, tx2, name)
	if err != nil || !ok {
		t.Fatalf("TryLockTx after commit: ok=%v err=%v", ok, err)
	}
	if second <= first {
		t.Fatalf("token %d after %d", second, first)
	}
	if _, err := advisory.LockTx(ctx, nil, name); err == nil {
		t.Error("LockTx(nil tx) accepted")
	}
	if _, err := advisory.LockTx(ctx, tx2, ""); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("LockTx with an empty name: %v", err)
	}
}
