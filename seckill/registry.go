package seckill

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlockhq/dlock"
	etcdlock "github.com/dlockhq/dlock/adapters/etcd"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	zklock "github.com/dlockhq/dlock/adapters/zk"
	"github.com/dlockhq/dlock/advisory"
	"github.com/dlockhq/dlock/tablelock"
)

// Servers are what the registered strategies run on.
type Servers struct {
	// DB holds the goods and the orders (and the lock table).
	DB *sql.DB
	// Locks is the pool advisory locks pin their connections from; nil:
	// DB. Give them a pool of their own: on a shared bounded pool, waiters
	// can take every connection and the holder can never finish.
	Locks *sql.DB
	// Redis and ZK serve the strategies that lock there; nil: those
	// strategies are unavailable. The zk strategy's leases have the
	// default TTL (dlock.DefaultTTL): connect ZK with a session timeout
	// no shorter (see package zklock).
	Redis redis.UniversalClient
	ZK    *zk.Conn
	// ZKRoot is where ZooKeeper locks live; "": /dlock-seckill.
	ZKRoot string
	// Etcd serves the etcd strategy; nil: it is unavailable.
	Etcd *clientv3.Client
	// EtcdRoot is the prefix of etcd locks' keys; "": dlock-seckill.
	EtcdRoot string
	// Segments is how many stock segments Segmented uses; 0: 8.
	Segments int
}

// ErrUnavailable is returned by Entry.New when a server the strategy
// needs is not in Servers.
var ErrUnavailable = errors.New("seckill: the strategy's server is not given")

// Entry is one registered strategy.
type Entry struct {
	// Name is the strategy's name (Strategy.Name), as the seckill
	// program's --strategy takes it.
	Name string
	// Needs names the server the strategy needs beside DB: "redis", "zk",
	// "etcd" or "".
	Needs string
	// New builds the strategy on srv. The Locker of a lock-based strategy
	// is its own, shared by every buyer goroutine as a service shares one;
	// closing the strategy (Close) gives back what it holds.
	New func(srv Servers) (*Registered, error)
}

// Registered is a strategy built from the registry, with what it holds.
type Registered struct {
	Strategy
	locker interface{ Close(context.Context) error }
}

// Close releases the strategy's Locker, if it has one.
func (r *Registered) Close(ctx context.Context) error {
	if r.locker == nil {
		return nil
	}
	return r.locker.Close(ctx)
}

// Strategies is every strategy, in the order the seckill program reports
// them: the unlocked one first, then the database's own concurrency
// control, then each lock.
var Strategies = []Entry{
	{Name: "none", New: plain(None)},
	{Name: "atomic", New: plain(Atomic)},
	{Name: "pessimistic", New: plain(Pessimistic)},
	{Name: "optimistic", New: plain(Optimistic)},
	{Name: "tablelock", New: locked("tablelock", "", func(srv Servers) (closingLocker, error) { return tablelock.New(srv.DB) })},
	{Name: "advisory", New: locked("advisory", "", func(srv Servers) (closingLocker, error) {
		locks := srv.Locks
		if locks == nil {
			locks = srv.DB
		}
		return advisory.New(locks)
	})},
	{Name: "redis", Needs: "redis", New: locked("redis", "redis", func(srv Servers) (closingLocker, error) { return redislock.New(srv.Redis) })},
	{Name: "redis-fair", Needs: "redis", New: locked("redis-fair", "redis", func(srv Servers) (closingLocker, error) { return redislock.NewFair(srv.Redis) })},
	{Name: "zk", Needs: "zk", New: locked("zk", "zk", func(srv Servers) (closingLocker, error) {
		root := srv.ZKRoot
		if root == "" {
			root = "/dlock-seckill"
		}
		return zklock.New(srv.ZK, root)
	})},
	{Name: "etcd", Needs: "etcd", New: locked("etcd", "etcd", func(srv Servers) (closingLocker, error) {
		root := srv.EtcdRoot
		if root == "" {
			root = "dlock-seckill"
		}
		return etcdlock.New(srv.Etcd, root)
	})},
	{Name: "segmented", Needs: "redis", New: func(srv Servers) (*Registered, error) {
		segments := srv.Segments
		if segments == 0 {
			segments = 8
		}
		return withLocker(srv, "redis", func(srv Servers) (closingLocker, error) { return redislock.New(srv.Redis) },
			func(l dlock.Locker) (Strategy, error) { return Segmented(srv.DB, segments, l) })
	}},
}

// Lookup returns the registered strategy name.
func Lookup(name string) (Entry, bool) {
	for _, e := range Strategies {
		if e.Name == name {
			return e, true
		}
	}
	return Entry{}, false
}

// closingLocker is a Locker that Close releases.
type closingLocker interface {
	dlock.Locker
	Close(context.Context) error
}

func plain(mk func(*sql.DB) (Strategy, error)) func(Servers) (*Registered, error) {
	return func(srv Servers) (*Registered, error) {
		if srv.DB == nil {
			return nil, fmt.Errorf("%w: DB", ErrUnavailable)
		}
		s, err := mk(srv.DB)
		if err != nil {
			return nil, err
		}
		return &Registered{Strategy: s}, nil
	}
}

func locked(name, needs string, mk func(Servers) (closingLocker, error)) func(Servers) (*Registered, error) {
	return func(srv Servers) (*Registered, error) {
		return withLocker(srv, needs, mk, func(l dlock.Locker) (Strategy, error) { return Locked(srv.DB, name, l) })
	}
}

// withLocker builds a lock-based strategy: its Locker, then the strategy
// on it, checking first that the servers it needs are given.
func withLocker(srv Servers, needs string, mk func(Servers) (closingLocker, error), strategy func(dlock.Locker) (Strategy, error)) (*Registered, error) {
	switch {
	case srv.DB == nil:
		return nil, fmt.Errorf("%w: DB", ErrUnavailable)
	case needs == "redis" && srv.Redis == nil:
		return nil, fmt.Errorf("%w: Redis", ErrUnavailable)
	case needs == "zk" && srv.ZK == nil:
		return nil, fmt.Errorf("%w: ZK", ErrUnavailable)
	case needs == "etcd" && srv.Etcd == nil:
		return nil, fmt.Errorf("%w: Etcd", ErrUnavailable)
	}
	l, err := mk(srv)
	if err != nil {
		return nil, err
	}
	s, err := strategy(l)
	if err != nil {
		return nil, errors.Join(err, l.Close(context.Background()))
	}
	return &Registered{Strategy: s, locker: l}, nil
}
