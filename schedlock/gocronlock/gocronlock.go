// Package gocronlock plugs dlock into go-co-op/gocron v2: a Locker
// (gocron.WithDistributedLocker) that takes each job's slot through
// package schedlock, so a fast job runs once per slot even when the
// schedulers fire at skewed times (lockAtLeastFor, which gocron's own
// lockers lack), and an Elector (gocron.WithDistributedElector) on
// package election.
//
// gocron hands its jobs no context from the lock: a job that must stop
// when the lock is lost, or fence its writes, runs its work through
// schedlock.Runner.Run itself, or under the Elector's Leadership.
package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlockhq/dlock/election"
	"github.com/dlockhq/dlock/schedlock"
)

// Locker is a gocron.Locker: Lock takes the job's slot (the key is the
// job's name) for at most lockAtMostFor and keeps it closed for
// lockAtLeastFor after the run began; it fails, so gocron skips the run,
// when another scheduler holds the slot.
type Locker struct {
	r               *schedlock.Runner
	atMost, atLeast time.Duration
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker on r. The durations are checked as Run
// checks them, before any I/O.
func NewLocker(r *schedlock.Runner, lockAtMostFor, lockAtLeastFor time.Duration) (*Locker, error) {
	if r == nil {
		return nil, errors.New("gocronlock: nil Runner")
	}
	if err := r.Validate("gocron", lockAtMostFor, lockAtLeastFor); err != nil {
		return nil, err
	}
	return &Locker{r: r, atMost: lockAtMostFor, atLeast: lockAtLeastFor}, nil
}

// Lock implements gocron.Locker. Its error wraps schedlock.ErrSkipped
// when the slot is taken.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	s, err := l.r.Begin(ctx, key, l.atMost, l.atLeast)
	if err != nil {
		return nil, err
	}
	return lock{s}, nil
}

type lock struct{ s *schedlock.Slot }

// Unlock ends the run (schedlock.Slot.End).
func (l lock) Unlock(ctx context.Context) error { return l.s.End(ctx) }

// ErrNotLeader is returned by Elector.IsLeader on a scheduler that does
// not lead.
var ErrNotLeader = errors.New("gocronlock: not the leader")

// Elector is a gocron.Elector: it campaigns in the background, and
// IsLeader says whether this scheduler leads now. Leadership ends before
// another scheduler's can begin (dlock's lease rule), so two schedulers
// never both run their jobs.
type Elector struct {
	e     *election.Election
	value string
	stop  context.CancelFunc
	ended chan struct{}

	mu      sync.Mutex
	leading *election.Leadership // nil when not leading
	lastErr error                // the last failed campaign's, until one succeeds
}

var _ gocron.Elector = (*Elector)(nil)

// retryAfter is the pause before a campaign that failed (the servers out
// of reach) is made again.
const retryAfter = time.Second

// NewElector starts campaigning in e with value (what Leader and
// Observe show for this scheduler) until Close.
func NewElector(e *election.Election, value string) (*Elector, error) {
	if e == nil {
		return nil, errors.New("gocronlock: nil Election")
	}
	ctx, stop := context.WithCancel(context.Background())
	el := &Elector{e: e, value: value, stop: stop, ended: make(chan struct{})}
	go el.campaign(ctx)
	return el, nil
}

func (el *Elector) campaign(ctx context.Context) {
	defer close(el.ended)
	for ctx.Err() == nil {
		ld, err := el.e.Campaign(ctx, el.value)
		el.mu.Lock()
		el.leading, el.lastErr = ld, err
		el.mu.Unlock()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(retryAfter):
			}
			continue
		}
		select {
		case <-ld.Done():
		case <-ctx.Done():
		}
		el.mu.Lock()
		el.leading = nil
		el.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.Background(), election.DefaultHandOver)
		_ = ld.Resign(rctx) // after a loss: nothing to give up
		cancel()
	}
}

// IsLeader implements gocron.Elector: nil while this scheduler leads,
// otherwise an error wrapping ErrNotLeader (with the last campaign's
// error, if it failed).
func (el *Elector) IsLeader(context.Context) error {
	el.mu.Lock()
	defer el.mu.Unlock()
	if el.leading != nil && el.leading.Err() == nil {
		return nil
	}
	if el.lastErr != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, el.lastErr)
	}
	return ErrNotLeader
}

// Leadership returns this scheduler's leadership, nil when it does not
// lead: its Term fences the jobs' writes, its Context ends with it.
func (el *Elector) Leadership() *election.Leadership {
	el.mu.Lock()
	defer el.mu.Unlock()
	return el.leading
}

// Close stops campaigning and hands leadership over if this scheduler
// leads. ctx bounds the wait.
func (el *Elector) Close(ctx context.Context) error {
	el.stop()
	select {
	case <-el.ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
