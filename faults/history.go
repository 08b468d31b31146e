package faults

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/sys/unix"
)

// Now is the time of the machine's monotonic clock in nanoseconds. It is
// one clock for every process on the machine and does not jump with the
// wall clock, so histories recorded by several processes can be merged.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux
	}
	return ts.Nano()
}

// Kind says what an Op did.
type Kind string

// The kinds of Op.
const (
	// Acquire is a Lock or TryLock call.
	Acquire Kind = "acquire"
	// Release is a Lease.Unlock call.
	Release Kind = "release"
)

// Outcome is what an Op returned.
type Outcome string

// The outcomes of an Op.
const (
	// OK: acquired (with Token), or released.
	OK Outcome = "ok"
	// Refused: TryLock said the lock is held (dlock.ErrNotAcquired).
	Refused Outcome = "refused"
	// Lost: Unlock said the lease had already ended (dlock.ErrNotHeld,
	// dlock.ErrLost): it ended at some point after it was acquired.
	Lost Outcome = "lost"
	// Unknown: the call failed or timed out and may or may not have
	// taken effect, or the process died during it.
	Unknown Outcome = "unknown"
)

// Op is one call on a lock, as a client saw it: invoked at Call and
// returned at Return (both from Now), by Client.
type Op struct {
	Client  int     `json:"client"`
	Kind    Kind    `json:"kind"`
	Call    int64   `json:"call"`
	Return  int64   `json:"return"`
	Outcome Outcome `json:"outcome"`
	Token   uint64  `json:"token,omitempty"`
	// Done, on a Release, is when the lease's Done channel was seen
	// closed, if that was before Unlock was called (the lease ended on its
	// own); 0 otherwise.
	Done int64 `json:"done,omitempty"`
	// Paused, on an Acquire, marks a grant whose holder was frozen
	// (SIGSTOP) while it held: no lock can tell a frozen process anything,
	// so its lease may be overtaken at any time (the fencing token is what
	// protects the resource from it).
	Paused bool `json:"paused,omitempty"`
}

// Result is what Check found.
type Result struct {
	// Ops is how many operations the linearizability check covered.
	Ops int
	// Linearizable is porcupine's verdict: Ok, Illegal, or Unknown when
	// the check ran out of time.
	Linearizable porcupine.CheckResult
	// Violations describes each broken invariant (empty when none).
	Violations []string
}

// OK reports whether the history was proven linearizable with no
// invariant broken.
func (r Result) OK() bool {
	return r.Linearizable == porcupine.Ok && len(r.Violations) == 0
}

func (r Result) String() string {
	return fmt.Sprintf("%d ops, linearizable: %s, %d violations %v", r.Ops, r.Linearizable, len(r.Violations), r.Violations)
}

// mutex is the state of the model: who holds the lock (-1: nobody) and
// the last token granted.
type mutex struct {
	holder int
	token  uint64
}

type input struct {
	client int
	kind   Kind
}

type output struct {
	outcome Outcome
	token   uint64
}

// leaseModel is a mutex whose grants carry strictly increasing tokens.
var leaseModel = porcupine.Model{
	Init: func() any { return mutex{holder: -1} },
	Step: func(state, in, out any) (bool, any) {
		s, i, o := state.(mutex), in.(input), out.(output)
		switch {
		case i.kind == Acquire && o.outcome == OK:
			return s.holder == -1 && o.token > s.token, mutex{i.client, o.token}
		case i.kind == Acquire: // refused
			return s.holder != -1, s
		default: // release
			return s.holder == i.client, mutex{-1, s.token}
		}
	},
	DescribeOperation: func(in, out any) string {
		i, o := in.(input), out.(output)
		return fmt.Sprintf("%d %s → %s %d", i.client, i.kind, o.outcome, o.token)
	},
}

// Check checks a history of one lock name against a mutex whose grants
// carry strictly increasing tokens, with porcupine, and checks that tokens
// increase across holders in real time.
//
// The lease rule is checked strictly: a lease that ended on its own (Unlock
// reported Lost) is released when its holder saw Done close (or, when Done
// was still open as Unlock was called, during Unlock), never earlier: a
// successor granted while the holder's Done was still open is not
// linearizable, even if the holder's Unlock reported the loss afterwards.
// Only a holder that died, was frozen (Paused), or could not tell
// (Unknown) may be overtaken at any later time. An acquire with an Unknown
// outcome is left out: if it took the lock, the lease expired unseen, and
// no client acted on it.
func Check(history []Op, timeout time.Duration) Result {
	p := pairing{held: map[int]Op{}}
	sorted := slices.Clone(history)
	slices.SortStableFunc(sorted, func(a, b Op) int { return compare(a.Call, b.Call) })
	for _, op := range sorted {
		p.add(op)
	}
	for _, acq := range p.held {
		p.release(acq, nil)
	}
	res := Result{Ops: len(p.ops), Violations: p.violations}
	res.Linearizable = porcupine.CheckOperationsTimeout(leaseModel, p.ops, timeout)
	res.Violations = append(res.Violations, TokenOrder(history)...)
	if res.Linearizable == porcupine.Illegal {
		res.Violations = append(res.Violations, "history is not linearizable for a mutex with increasing tokens")
	}
	return res
}

// pairing turns a history, in call order, into porcupine's operations:
// each release paired with the grant its client held.
type pairing struct {
	ops        []porcupine.Operation
	held       map[int]Op // the grant each client holds
	violations []string
}

func (p *pairing) add(op Op) {
	switch {
	case op.Kind == Acquire && op.Outcome == Unknown:
	case op.Kind == Acquire:
		if _, ok := p.held[op.Client]; ok && op.Outcome == OK {
			p.violations = append(p.violations, fmt.Sprintf("client %d acquired again while holding", op.Client))
		}
		if op.Outcome == OK {
			p.held[op.Client] = op
		}
		p.ops = append(p.ops, porcupine.Operation{
			ClientId: op.Client,
			Input:    input{op.Client, Acquire},
			Output:   output{op.Outcome, op.Token},
			Call:     op.Call,
			Return:   op.Return,
		})
	case op.Kind == Release:
		acq, ok := p.held[op.Client]
		if !ok {
			p.violations = append(p.violations, fmt.Sprintf("client %d released without holding", op.Client))
			return
		}
		delete(p.held, op.Client)
		p.release(acq, &op)
	}
}

// release adds the release of acq: when the holder let go (rel, nil when
// it never did) by the lease rule.
func (p *pairing) release(acq Op, rel *Op) {
	op := porcupine.Operation{
		ClientId: acq.Client,
		Input:    input{acq.Client, Release},
		Output:   output{outcome: OK},
		Call:     acq.Return,
		Return:   math.MaxInt64,
	}
	switch {
	case rel == nil || rel.Outcome == Unknown || acq.Paused:
	case rel.Outcome == Lost && rel.Done != 0:
		// Held, for the holder, until it saw Done close.
		op.Call, op.Return = rel.Done, rel.Done
	default: // released by Unlock, or Done was still open when it was called
		op.Call, op.Return = rel.Call, rel.Return
	}
	p.ops = append(p.ops, op)
}

// TokenOrder checks that every grant that began after another returned
// has a larger token, and describes each that does not (a token
// regression). It holds even where the lock itself may be granted twice
// (a failover to an asynchronous replica): it is what lets a fenced
// resource refuse the stale holder.
func TokenOrder(history []Op) []string {
	var grants []Op
	for _, op := range history {
		if op.Kind == Acquire && op.Outcome == OK {
			grants = append(grants, op)
		}
	}
	slices.SortFunc(grants, func(a, b Op) int { return compare(a.Return, b.Return) })
	// most[i] is the grant with the largest token of grants[:i+1].
	most := make([]Op, len(grants))
	for i, g := range grants {
		most[i] = g
		if i > 0 && most[i-1].Token > g.Token {
			most[i] = most[i-1]
		}
	}
	var bad []string
	for _, g := range grants {
		// The grants that returned before g was called.
		n, _ := slices.BinarySearchFunc(grants, g.Call, func(e Op, call int64) int { return compare(e.Return, call) })
		if n > 0 && most[n-1].Token >= g.Token {
			e := most[n-1]
			bad = append(bad, fmt.Sprintf("client %d got token %d after client %d got %d", g.Client, g.Token, e.Client, e.Token))
		}
	}
	return bad
}

func compare(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
