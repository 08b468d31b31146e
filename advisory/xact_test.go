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
	l := newLocker(t, db)
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback()
	first, err := l.LockTx(ctx, tx1, name)
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
	if _, ok, err := l.TryLockTx(ctx, tx2, name); err != nil || ok {
		t.Fatalf("TryLockTx while another tx holds: ok=%v err=%v", ok, err)
	}
	if _, err := newLocker(t, db).TryLock(ctx, name); !errors.Is(err, dlock.ErrNotAcquired) {
		t.Fatalf("session TryLock while a tx holds: %v, want ErrNotAcquired", err)
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	second, ok, err := l.TryLockTx(ctx, tx2, name)
	if err != nil || !ok {
		t.Fatalf("TryLockTx after commit: ok=%v err=%v", ok, err)
	}
	if second <= first {
		t.Fatalf("token %d after %d", second, first)
	}
	if _, err := l.LockTx(ctx, nil, name); err == nil {
		t.Error("LockTx(nil tx) accepted")
	}
	if _, err := l.LockTx(ctx, tx2, ""); !errors.Is(err, dlock.ErrInvalidName) {
		t.Errorf("LockTx with an empty name: %v", err)
	}
}

// On MySQL the transaction-scoped calls say so, before any I/O on tx.
func TestTransactionScopedOnMySQL(t *testing.T) {
	db := migrated(t, testenv.MySQL)
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	l := newLocker(t, db)
	if _, err := l.LockTx(ctx, tx, dlocktest.Name(t)); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("LockTx on MySQL: %v, want errors.ErrUnsupported", err)
	}
	if _, _, err := l.TryLockTx(ctx, tx, dlocktest.Name(t)); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("TryLockTx on MySQL: %v, want errors.ErrUnsupported", err)
	}
	// tx is untouched: it still works.
	var one int
	if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("tx after the refused calls: %v", err)
	}
}
