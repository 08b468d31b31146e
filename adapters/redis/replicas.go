package redislock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
)

// ErrNotReplicated is returned by Lock and TryLock in failover-safe mode
// (WithReplicas) when fewer replicas than asked acknowledged the grant in
// time: the lease is refused, not granted, because a failover could lose
// it. A renewal that is not acknowledged fails the same way and leaves the
// lease's deadline where it was.
var ErrNotReplicated = errors.New("redislock: not acknowledged by enough replicas")

// replicasKey is the key of WithReplicas's setting.
type replicasKey struct{}

// WithReplicas is failover-safe mode: every grant and renewal is followed,
// on the same connection, by WAIT n, and counts only when n replicas have
// acknowledged it, within a third of the TTL (a grant that is not is
// released and Lock fails with ErrNotReplicated). A replica that a
// failover promotes then has every lease its holder was told it has, so
// the lock is not granted twice. The cost is a replica round trip on every
// grant and renewal, and no grants while fewer than n replicas are up.
// Releases are not waited for: a lost release only delays the next holder
// until the lease's expiry. n must be at least 1; a Redis Cluster client is
// served by the master of each lock's slot, a Ring is refused.
func WithReplicas(n int) dlock.Option { return dlock.WithSetting(replicasKey{}, n) }

// replicasOf reads WithReplicas from cfg and checks it against client.
func replicasOf(cfg dlock.Config, client redis.UniversalClient) (int, error) {
	v, ok := cfg.Setting(replicasKey{})
	if !ok {
		return 0, nil
	}
	n := v.(int)
	if n < 1 {
		return 0, fmt.Errorf("redislock: WithReplicas(%d): at least one replica must acknowledge", n)
	}
	switch client.(type) {
	case *redis.Client, *redis.ClusterClient:
	default:
		return 0, fmt.Errorf("redislock: WithReplicas needs a *redis.Client (single or Sentinel) or *redis.ClusterClient, not %T", client)
	}
	return n, nil
}

// waitTimeout is how long a grant or renewal waits for its replicas: a
// third of the TTL, as a renewal's interval, so an unconfirmed renewal
// still leaves room for the next try before the deadline.
func waitTimeout(ttl time.Duration) time.Duration { return ttl / 3 }

// master is the client whose connection runs name's scripts: the client
// itself, or on a Cluster in failover-safe mode the master of name's slot
// (WAIT must follow the write on the connection that made it).
func (b *backend) master(ctx context.Context, name string) (redis.Cmdable, error) {
	if c, ok := b.client.(*redis.ClusterClient); ok && b.replicas > 0 {
		return c.MasterForKey(ctx, keysFor(name).lock())
	}
	return b.client, nil
}

// onMaster runs f on name's master (see master). On a Cluster in
// failover-safe mode, a node that answers that it no longer serves the
// slot (MOVED, READONLY, CLUSTERDOWN), or does not answer at all, may
// have been failed over: the client's slot map is reloaded until it
// names another master (for up to failoverReload), and f runs once more
// there. f's calls are each one script that either ran or did not.
func (b *backend) onMaster(ctx context.Context, name string, f func(c redis.Cmdable) error) error {
	c, err := b.master(ctx, name)
	if err != nil {
		return err
	}
	err = f(c)
	cluster, ok := b.client.(*redis.ClusterClient)
	if !ok || b.replicas == 0 || !failedOver(err) {
		return err
	}
	old, _ := c.(*redis.Client)
	start := time.Now()
	for ctx.Err() == nil && time.Since(start) < failoverReload {
		cluster.ReloadState(ctx) // asynchronous: the map changes when it is done
		time.Sleep(50 * time.Millisecond)
		next, nerr := cluster.MasterForKey(ctx, keysFor(name).lock())
		moved := nerr == nil && (old == nil || next.Options().Addr != old.Options().Addr)
		if moved || nerr == nil && time.Since(start) > failoverReload/4 { // the same master after all: try it again
			return f(next)
		}
	}
	return err
}

// failoverReload bounds onMaster's wait for a Cluster's new slot map.
const failoverReload = 2 * time.Second

// failedOver reports whether err may say the node was not, or is no
// longer, the master of the slot.
func failedOver(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	for _, prefix := range []string{"MOVED", "READONLY", "CLUSTERDOWN", "TRYAGAIN"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNREFUSED)
}

// runReplicated runs s on c and, when replicas > 0, WAITs on the same
// connection (a pipeline) for replicas to acknowledge it within wait.
// unconfirmed is non-nil when they did not; the script's result is in
// cmd either way.
func runReplicated(ctx context.Context, c redis.Scripter, replicas int, wait time.Duration, s *redis.Script,
	keys []string, args ...any) (cmd *redis.Cmd, unconfirmed error) {
	if replicas == 0 {
		return s.Run(ctx, c, keys, args...), nil
	}
	p, ok := c.(interface{ Pipeline() redis.Pipeliner })
	if !ok {
		return s.Run(ctx, c, keys, args...), fmt.Errorf("%w: %T cannot pipeline", ErrNotReplicated, c)
	}
	var acked *redis.Cmd
	for range 2 {
		pipe := p.Pipeline()
		cmd = pipe.EvalSha(ctx, s.Hash(), keys, args...)
		acked = pipe.Do(ctx, "wait", replicas, ms(wait)) // ms ≥ 1: WAIT 0 would never time out
		_, _ = pipe.Exec(ctx)                            // each command keeps its own error
		if !redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			break
		}
		if err := s.Load(ctx, c).Err(); err != nil {
			return cmd, nil
		}
	}
	if cmd.Err() != nil {
		return cmd, nil
	}
	if err := acked.Err(); err != nil {
		return cmd, fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err)
	}
	if n, _ := acked.Int64(); n < int64(replicas) {
		return cmd, fmt.Errorf("%w: %d of %d replicas within %v", ErrNotReplicated, n, replicas, wait)
	}
	return cmd, nil
}

// only refuses settings of this package that ctor does not take.
func only(cfg dlock.Config, ctor string, allowed ...any) error {
	for _, key := range []any{replicasKey{}, queueTimeoutKey{}, restartWindowKey{}} {
		if _, set := cfg.Setting(key); set && !slices.Contains(allowed, key) {
			return fmt.Errorf("redislock: %s does not take %s", ctor, settingNames[key])
		}
	}
	return nil
}

var settingNames = map[any]string{replicasKey{}: "WithReplicas", queueTimeoutKey{}: "WithQueueTimeout", restartWindowKey{}: "WithRestartWindow"}
