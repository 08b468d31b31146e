package zklock_test

import (
	"context"
	"log"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/dlockhq/dlock"
	zklock "github.com/dlockhq/dlock/adapters/zk"
)

func ExampleNew() {
	conn, _, err := zk.Connect([]string{"127.0.0.1:2181"}, 15*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// The lease may not outlive the session: TTL no longer than it.
	locker, err := zklock.New(conn, "/dlock", dlock.WithTTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := locker.Lock(ctx, "scheduler-leader")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
	<-lease.Done() // lead until the session is lost
}

func ExampleNewReadWrite() {
	conn, _, err := zk.Connect([]string{"127.0.0.1:2181"}, 15*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	rw, err := zklock.NewReadWrite(conn, "/dlock", dlock.WithTTL(15*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// Many processes may read the price list at once; a writer waits for
	// them, and readers that come after a waiting writer wait for it.
	lease, err := rw.Read.Lock(ctx, "price-list")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)
}

func ExampleNewSemaphore() {
	conn, _, err := zk.Connect([]string{"127.0.0.1:2181"}, 15*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// At most 4 report builders at once across every process.
	sem, err := zklock.NewSemaphore(conn, "/dlock", "report-builders", 4)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	permit, err := sem.Acquire(ctx, 1)
	if err != nil {
		log.Fatal(err)
	}
	defer permit.Release(ctx)
}
