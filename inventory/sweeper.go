package inventory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlockhq/dlock/schedlock"
)

// SweeperJob is the schedlock job name RunSweeper runs under.
const SweeperJob = "inventory-sweeper"

// sweepBatch is how many reservations one Sweep call expires at most.
const sweepBatch = 500

// RunSweeper expires overdue reservations every interval until ctx ends
// (and, with the redis strategy, reconciles every item's count in Redis),
// then returns ctx's error. Every node of the fleet may run it, each with
// a schedlock.Runner on a Locker of the same backend: each interval's
// sweep runs on one node (lockAtLeastFor is half the interval, so nodes
// whose timers drift do not sweep twice), and when that node dies the
// next interval's sweep runs on another. Expired units are back in the
// stock within the reservation TTL plus the interval; plus the Locker's
// TTL when the node sweeping dies or cannot release the slot's lock.
//
// The Runner's Locker's TTL must be at most max(interval, 1m), the longest
// a sweep may hold the slot. Errors of a sweep go to onError (nil: they
// are dropped) and the next interval tries again.
func (s *Store) RunSweeper(ctx context.Context, r *schedlock.Runner, interval time.Duration, onError func(error)) error {
	if r == nil {
		return errors.New("inventory: RunSweeper: nil *schedlock.Runner")
	}
	if interval <= 0 {
		return fmt.Errorf("inventory: RunSweeper: interval %v: not positive", interval)
	}
	atMost := max(interval, time.Minute)
	if err := r.Validate(SweeperJob, atMost, interval/2); err != nil {
		return fmt.Errorf("inventory: RunSweeper: %w", err)
	}
	job := func(ctx context.Context, _ uint64) error {
		for {
			n, err := s.Sweep(ctx, sweepBatch)
			if err != nil {
				return err
			}
			if n < sweepBatch {
				return s.reconcileAll(ctx)
			}
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := r.Run(ctx, SweeperJob, job, atMost, interval/2)
		if err != nil && !errors.Is(err, schedlock.ErrSkipped) && ctx.Err() == nil && onError != nil {
			onError(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// reconcileAll reconciles the count of every item Redis holds one of,
// for the redis strategy. An item whose count Redis lost is not among
// them: its next Reserve rebuilds it.
func (s *Store) reconcileAll(ctx context.Context) error {
	if s.strategy != Redis {
		return nil
	}
	skus, err := s.gate.c.SMembers(ctx, s.gate.itemsKey()).Result()
	if err != nil {
		return fmt.Errorf("inventory: reconcile: %w", err)
	}
	var errs []error
	for _, sku := range skus {
		errs = append(errs, s.Reconcile(ctx, sku))
	}
	return errors.Join(errs...)
}
