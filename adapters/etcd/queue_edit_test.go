package etcdlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv/etcdenv"
)

// editRounds is how many rounds each operator edit is tried: the grant
// of a waiter whose key went with its predecessor's showed in 16 of 20.
const editRounds = 6

// An operator deletes a holder's key and its waiter's key in one
// transaction, or revokes the waiter's lease as the holder's key goes,
// or deletes a whole queue in one request: no waiter whose own key is
// gone is granted, each fails at once with ErrLost, and a deleted queue
// grants nobody. etcd's concurrency.Mutex, run the same way beside, is
// the control (it reads its own key after its wait).
func TestOperatorEditsOfTheQueue(t *testing.T) {
	t.Run("single", func(t *testing.T) { operatorEdits(t, etcdenv.Endpoints()) })
	t.Run("cluster", func(t *testing.T) { operatorEdits(t, etcdenv.StartCluster(t).Endpoints) })
}

func operatorEdits(t *testing.T, eps []string) {
	admin := etcdenv.Client(t, eps)
	edits := map[string]func(ctx context.Context, holder string, waiters []*clientv3.GetResponse) error{
		"delete both in one txn": func(ctx context.Context, holder string, q []*clientv3.GetResponse) error {
			_, err := admin.Txn(ctx).Then(clientv3.OpDelete(holder), clientv3.OpDelete(string(q[0].Kvs[1].Key))).Commit()
			return err
		},
		"revoke the waiter lease then delete the holder key": func(ctx context.Context, holder string, q []*clientv3.GetResponse) error {
			done := make(chan error, 1)
			go func() { _, err := admin.Revoke(ctx, clientv3.LeaseID(q[0].Kvs[1].Lease)); done <- err }()
			_, err := admin.Delete(ctx, holder)
			return errors.Join(err, <-done)
		},
	}
	for what, edit := range edits {
		t.Run(what, func(t *testing.T) {
			granted := 0
			for round := range editRounds {
				ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
				name := fmt.Sprintf("%s.%d", dlocktest.Name(t), round)
				holder, waiter := newLocker(t, etcdenv.Client(t, eps)), newLocker(t, etcdenv.Client(t, eps))
				held, err := holder.Lock(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				waited := make(chan error, 1)
				go func() {
					lease, err := waiter.Lock(ctx, name)
					if err == nil {
						granted++
						_ = lease.Unlock(context.Background())
					}
					waited <- err
				}()
				q := queued(t, ctx, admin, name, 2)
				if err := edit(ctx, keyOf(name, held), q); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-waited:
					if err != nil && !errors.Is(err, dlock.ErrLost) {
						t.Errorf("round %d: the waiter whose key went failed with %v, want ErrLost", round, err)
					}
				case <-time.After(ttl):
					t.Errorf("round %d: the waiter whose key went still waits a TTL later", round)
				}
				_ = held.Unlock(context.Background())
				cancel()
			}
			if granted > 0 {
				t.Errorf("%d of %d waiters whose own key was gone were granted the lock", granted, editRounds)
			}
			t.Logf("concurrency.Mutex, the same way: %d of %d granted", mutexGrantedAfter(t, eps, admin, edit), editRounds)
		})
	}
	t.Run("delete the queue", func(t *testing.T) {
		const waiters = 6
		for round := range editRounds / 2 {
			ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
			name := fmt.Sprintf("%s.%d", dlocktest.Name(t), round)
			held, err := newLocker(t, etcdenv.Client(t, eps)).Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			results := make(chan dlock.Lease, waiters)
			for range waiters {
				w := newLocker(t, etcdenv.Client(t, eps))
				go func() {
					lease, _ := w.Lock(ctx, name)
					results <- lease
				}()
			}
			queued(t, ctx, admin, name, waiters+1)
			if _, err := admin.Delete(ctx, root+"/lock/"+name+"/", clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
			got := 0
			for range waiters {
				if lease := <-results; lease != nil {
					got++
					_ = lease.Unlock(context.Background())
				}
			}
			if got > 0 {
				t.Errorf("round %d: %d of %d waiters were granted after their queue was deleted", round, got, waiters)
			}
			_ = held.Unlock(context.Background())
			cancel()
		}
	})
}

// queued waits until name's queue has n keys, and returns it.
func queued(t *testing.T, ctx context.Context, c *clientv3.Client, name string, n int) []*clientv3.GetResponse {
	t.Helper()
	for {
		q := waitersOf(t, ctx, c, name)
		if len(q[0].Kvs) >= n {
			return q
		}
		if ctx.Err() != nil {
			t.Fatalf("%q's queue never had %d keys", name, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mutexGrantedAfter runs edit on concurrency.Mutex's queue editRounds
// times and returns how often its waiter was granted all the same.
func mutexGrantedAfter(t *testing.T, eps []string, admin *clientv3.Client, edit func(context.Context, string, []*clientv3.GetResponse) error) int {
	granted := 0
	for round := range editRounds {
		ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
		prefix := fmt.Sprintf("%s-mutex/%s.%d", root, dlocktest.Name(t), round)
		sessions := [2]*concurrency.Session{}
		for i := range sessions {
			s, err := concurrency.NewSession(etcdenv.Client(t, eps), concurrency.WithTTL(int(ttl/time.Second)))
			if err != nil {
				t.Fatal(err)
			}
			sessions[i] = s
		}
		holder, waiter := concurrency.NewMutex(sessions[0], prefix), concurrency.NewMutex(sessions[1], prefix)
		if err := holder.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		waited := make(chan error, 1)
		go func() { waited <- waiter.Lock(ctx) }()
		var q []*clientv3.GetResponse
		for {
			resp, err := admin.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) >= 2 {
				q = []*clientv3.GetResponse{resp}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := edit(ctx, holder.Key(), q); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-waited:
			if err == nil {
				granted++
			}
		case <-time.After(ttl):
		}
		cancel()
		for _, s := range sessions {
			_ = s.Close()
		}
	}
	return granted
}
