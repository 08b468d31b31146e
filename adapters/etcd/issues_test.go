package etcdlock_test

// What etcd's own lock, concurrency.Mutex, is known to get wrong, tried on
// dlock's etcd Locker. Each test says how the issue shows with
// concurrency.Mutex (client v3.7.3).

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	etcdlock "github.com/dlockhq/dlock/adapters/etcd"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/internal/testenv/etcdenv"
)

// keyOf is the key of lease's hold (a test's name needs no escaping; an
// owner id's '#' does).
func keyOf(name string, lease dlock.Lease) string {
	return root + "/lock/" + name + "/" + url.PathEscape(lease.Owner())
}

// waitersOf are the keys queued under name, oldest first.
func waitersOf(t *testing.T, ctx context.Context, c *clientv3.Client, name string) []*clientv3.GetResponse {
	t.Helper()
	resp, err := c.Get(ctx, root+"/lock/"+name+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	return []*clientv3.GetResponse{resp}
}

// contended is a name held by one Locker for the rest of the test, a
// second Locker to wait for it, a bare client, and the test's ctx.
func contended(t *testing.T) (context.Context, *clientv3.Client, *etcdlock.Locker, string) {
	t.Helper()
	eps := etcdenv.Endpoints()
	holder := newLocker(t, etcdenv.Client(t, eps))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	t.Cleanup(cancel)
	name := dlocktest.Name(t)
	held, err := holder.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = held.Unlock(ctx) })
	return ctx, etcdenv.Client(t, eps), newLocker(t, etcdenv.Client(t, eps)), name
}

// etcd issue 19597: a concurrency.Mutex waiter whose session's lease
// expires (revoked here, as a partition longer than the TTL would expire
// it) keeps waiting in Lock until its ctx ends, though its key is gone
// and it can never be granted. dlock's waiter fails at once.
func TestWaiterWhoseLeaseEndsFailsAtOnce(t *testing.T) {
	ctx, admin, waiter, name := contended(t)
	waited := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, name)
		waited <- err
	}()
	var lease clientv3.LeaseID
	for lease == 0 { // the waiter's key is queued behind the holder's
		resp := waitersOf(t, ctx, admin, name)[0]
		if len(resp.Kvs) == 2 {
			lease = clientv3.LeaseID(resp.Kvs[1].Lease)
		}
		time.Sleep(10 * time.Millisecond)
	}
	revoked := time.Now()
	if _, err := admin.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if err == nil || !errors.Is(err, dlock.ErrNotHeld) {
			t.Fatalf("waiter whose lease was revoked: %v, want an error wrapping ErrNotHeld", err)
		}
		t.Logf("the waiter failed %v after its lease was revoked: %v", time.Since(revoked).Round(time.Millisecond), err)
	case <-time.After(ttl):
		t.Fatal("the waiter whose lease was revoked still waits a TTL later")
	}
}

// etcd issue 22082: concurrency.Mutex's Unlock deletes the key its
// session holds by name; an Unlock retried after it succeeded (its reply
// lost) deletes a newer hold of the same session. dlock's late release is
// of one hold's lease and key: it finds that hold gone and leaves the
// newer one, of the same Locker, alone.
func TestLateReleaseLeavesANewerHold(t *testing.T) {
	l := newLocker(t, etcdenv.Client(t, etcdenv.Endpoints()))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	first, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	second, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Unlock(ctx)
	if err := etcdlock.ReleaseLate(ctx, l, name, first.Owner(), first.Token()); !errors.Is(err, dlock.ErrNotHeld) {
		t.Fatalf("late release of the first hold: %v, want ErrNotHeld", err)
	}
	h, ok, err := l.Inspect(ctx, name)
	if err != nil || !ok || h.Token != second.Token() {
		t.Fatalf("after the late release: holder %+v %v %v, want the second hold (token %d)", h, ok, err, second.Token())
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatalf("the second hold, after the late release: %v", err)
	}
}

// etcd issue 6127: a concurrency.Mutex holder is not told when its key is
// gone (deleted by hand, its lease revoked): nothing watches it. dlock's
// lease ends (Done closes) at its next renewal, within a third of the
// TTL, with ErrNotHeld.
func TestHolderLearnsItsKeyIsGone(t *testing.T) {
	eps := etcdenv.Endpoints()
	admin := etcdenv.Client(t, eps)
	l := newLocker(t, etcdenv.Client(t, eps))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	for _, how := range []string{"key deleted", "lease revoked"} {
		t.Run(how, func(t *testing.T) {
			name := dlocktest.Name(t)
			lease, err := l.Lock(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			key := keyOf(name, lease)
			if how == "key deleted" {
				var resp *clientv3.DeleteResponse
				if resp, err = admin.Delete(ctx, key); err == nil && resp.Deleted != 1 {
					t.Fatalf("no key %s", key)
				}
			} else {
				var resp *clientv3.GetResponse
				if resp, err = admin.Get(ctx, key); err == nil && len(resp.Kvs) == 1 {
					_, err = admin.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
				} else if err == nil {
					t.Fatalf("no key %s", key)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-lease.Done():
				if !errors.Is(lease.Err(), dlock.ErrNotHeld) {
					t.Errorf("lease ended with %v, want ErrNotHeld", lease.Err())
				}
			case <-time.After(ttl):
				t.Fatalf("%s: the lease is still open a TTL later", how)
			}
		})
	}
}

// etcd issues 10811 and 17470: with concurrency.Mutex, a holder cut off
// from the cluster is not told that its session's lease ran out, and
// goes on as the holder while another client is granted the lock; and a
// session's keep-alive goroutine can keep a lease (and the lock) alive
// after the work that held it is over. dlock renews only through the
// Locker's watchdog: a holder cut off loses its lease (Done closes) at
// its deadline, before the server lets the lease go and grants the lock
// to the waiter, and a holder whose client is gone holds the lock for one
// TTL at most.
func TestHolderCutOffLetsGoBeforeTheNextIsGranted(t *testing.T) {
	eps := etcdenv.Endpoints()
	proxy := testenv.NewProxy(t, eps[0])
	holder := newLocker(t, etcdenv.Client(t, []string{proxy.Addr()}))
	waiter := newLocker(t, etcdenv.Client(t, eps))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	held, err := holder.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	defer proxy.Restore()
	got, err := waiter.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	granted := time.Now()
	defer got.Unlock(ctx)
	select {
	case <-held.Done():
	default:
		t.Fatalf("the waiter was granted at %v while the cut-off holder's lease was open", granted)
	}
	if got.Token() <= held.Token() {
		t.Errorf("the next holder's token %d is not above %d", got.Token(), held.Token())
	}
}

func TestHolderWhoseClientIsGoneHoldsOneTTLAtMost(t *testing.T) {
	eps := etcdenv.Endpoints()
	c := etcdenv.Client(t, eps)
	holder := newLocker(t, c)
	waiter := newLocker(t, etcdenv.Client(t, eps))
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	if _, err := holder.Lock(ctx, name); err != nil {
		t.Fatal(err)
	}
	c.Close() // the process's client is gone, its Locker never unlocks
	gone := time.Now()
	got, err := waiter.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Unlock(ctx)
	// etcd expires a lease up to its TTL after the last keep-alive, plus
	// its expiry check's period (500 ms).
	if waited := time.Since(gone); waited > ttl+time.Second {
		t.Errorf("the lock was free %v after the holder's client went, want within a TTL (%v)", waited, ttl)
	}
}

// A waiter that gives up (its ctx ends) leaves no key behind: its key is
// deleted within moments (by Lock itself when it gave up while waiting,
// in the background when its ctx ended before its key's put was
// answered), so the queue does not wait for its lease.
func TestCancelledWaiterLeavesNoKey(t *testing.T) {
	ctx, admin, waiter, name := contended(t)
	for _, wait := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond, 300 * time.Millisecond} {
		wctx, wcancel := context.WithTimeout(ctx, wait)
		_, err := waiter.Lock(wctx, name)
		wcancel()
		if !errors.Is(err, dlock.ErrNotAcquired) {
			t.Fatalf("waiter that gave up after %v: %v", wait, err)
		}
		left := func() int { return len(waitersOf(t, ctx, admin, name)[0].Kvs) - 1 }
		for start := time.Now(); left() > 0 && time.Since(start) < time.Second; {
			time.Sleep(10 * time.Millisecond)
		}
		if n := left(); n != 0 {
			t.Fatalf("a second after a waiter gave up after %v, %d keys besides the holder's are queued", wait, n)
		}
	}
}
