package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
)

// The caller's ACLs and authentication pass through: nodes made under a
// digest ACL can be neither listed nor deleted by a client without the
// credentials, so it can neither see nor break the lock.
func TestDigestACL(t *testing.T) {
	addrs := testenv.ZKAddrs(t)
	const aclRoot = "/dlock-acl-test"
	alice := testenv.ZK(t, addrs, 4*time.Second)
	if err := alice.AddAuth("digest", []byte("alice:secret")); err != nil {
		t.Fatal(err)
	}
	l, err := zklock.New(alice, aclRoot, dlock.WithTTL(4*time.Second), zklock.WithACL(zk.DigestACL(zk.PermAll, "alice", "secret")))
	if err != nil {
		t.Fatal(err)
	}
	l = testenv.Closing(t, l)
	if _, err := zklock.New(alice, aclRoot, zklock.WithACL(nil)); err == nil {
		t.Error("WithACL(nil) accepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), dlocktest.Timeout)
	defer cancel()
	name := dlocktest.Name(t)
	lease, err := l.Lock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}

	mallory := testenv.ZK(t, addrs, 4*time.Second)
	if _, _, err := mallory.Children(aclRoot); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("listing the locks without credentials: %v, want ErrNoAuth", err)
	}
	nodes, _, err := alice.Children(aclRoot + "/" + escapeName(name))
	if err != nil || len(nodes) != 1 {
		t.Fatalf("the holder's node: %v, %v", nodes, err)
	}
	if err := mallory.Delete(aclRoot+"/"+escapeName(name)+"/"+nodes[0], -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("deleting the holder's node without credentials: %v, want ErrNoAuth", err)
	}
	other, err := zklock.New(mallory, aclRoot, dlock.WithTTL(4*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Closing(t, other)
	if _, err := other.TryLock(ctx, name); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("TryLock without credentials: %v, want an error wrapping ErrNoAuth", err)
	}
	if err := lease.Refresh(ctx); err != nil {
		t.Fatalf("the holder's lease after the attempts: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
