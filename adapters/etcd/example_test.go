package etcdlock_test

import (
	"context"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	etcdlock "github.com/dlockhq/dlock/adapters/etcd"
)

func ExampleNew() {
	client, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	locker, err := etcdlock.New(client, "dlock", dlock.WithTTL(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close(context.Background())
	ctx := context.Background()
	lease, err := locker.Lock(ctx, "invoice-run")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	// The token is the key's create revision: pass it to the storage the
	// work writes, which refuses a smaller one (dlock.Lease.Token).
	log.Printf("running as %d", lease.Token())
	<-lease.Done() // or do the work; Done closes if the lease is lost
}
