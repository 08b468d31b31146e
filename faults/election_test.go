package faults_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/election"
	"github.com/dlockhq/dlock/faults"
)

// campaigner is a dlock.Locker whose Lock campaigns in the election of
// the lock's name, so that the workers' loop (lock, read, write, unlock)
// runs as leaders that win, work and resign, and the history is checked
// as a lock's: terms increase, no leader wins while the last one's Done
// is open, no fenced write by a deposed leader is accepted.
type campaigner struct{ l dlock.Locker }

func (c campaigner) Lock(ctx context.Context, name string) (dlock.Lease, error) {
	e, err := election.New(c.l, name)
	if err != nil {
		return nil, err
	}
	ld, err := e.Campaign(ctx, "worker")
	if err != nil {
		return nil, err
	}
	return leadership{ld.Lease(), ld}, nil
}

func (c campaigner) TryLock(context.Context, string) (dlock.Lease, error) {
	return nil, errors.ErrUnsupported
}

// leadership is a Leadership as a dlock.Lease: its lease, but Done, Err
// and Unlock are the Leadership's.
type leadership struct {
	dlock.Lease
	ld *election.Leadership
}

func (l leadership) Done() <-chan struct{}            { return l.ld.Done() }
func (l leadership) Err() error                       { return l.ld.Err() }
func (l leadership) Unlock(ctx context.Context) error { return l.ld.Resign(ctx) }

// TestElectionFaults runs, per backend, three workers campaigning in one
// election, each leader working on the Resource with its term as token,
// and each round pauses the leader (SIGSTOP) past its TTL, kills a
// leader (SIGKILL), and cuts a leader off (its packets dropped) past its
// TTL. Leadership must move on each time, and the deposed leader learn
// it before its successor wins (the lease rule, checked strictly) or
// have its write refused.
func TestElectionFaults(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			b.needs(t)
			r := newRunVia(t, b.name, b.server, 3, envElection+"=1")
			r.recordFor(500 * time.Millisecond)
			pausesCaught, cutsCaught := 0, 0
			for range rounds() {
				if r.pause(3*ttl + time.Second) {
					pausesCaught++
				}
				r.recordFor(500 * time.Millisecond)
				r.kill()
				r.recordFor(3*ttl + time.Second)

				holder := r.live[0]
				r.untilBegun(holder.client)
				heal := toxic(t, holder.proxy, "timeout", map[string]int{"timeout": 0})
				cut := faults.Now()
				r.recordFor(3*ttl + time.Second)
				if r.grantsSince(holder.client, cut) > 0 {
					cutsCaught++
				}
				heal()
				r.recordFor(time.Second)
			}
			r.untilBegun(r.live[0].client)
			r.finish()
			if pausesCaught != rounds() || cutsCaught != rounds() {
				t.Errorf("leadership moved on in %d of %d pauses and %d of %d cuts past the TTL", pausesCaught, rounds(), cutsCaught, rounds())
			}
		})
	}
}
