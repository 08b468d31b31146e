package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
)

// Errors of package election.
var (
	// ErrNoLeader is returned by Election.Leader when nobody leads.
	ErrNoLeader = errors.New("election: no leader")
	// ErrResigned is Leadership.Err, and the cause of its Context's
	// cancellation, after Resign.
	ErrResigned = errors.New("election: leadership resigned")
	// ErrWorkRunning is returned by Resign when the leader's work (see
	// Leadership.Go) had not stopped when the hand-over bound passed:
	// leadership was handed over all the same.
	ErrWorkRunning = errors.New("election: the leader's work had not stopped when leadership was handed over")
)

// DefaultHandOver bounds how long Resign waits for the leader's work to
// stop before it hands leadership over (see WithHandOver).
const DefaultHandOver = 10 * time.Second

// DefaultObserveInterval is how often Observe reads who leads (see
// WithObserveInterval).
const DefaultObserveInterval = 200 * time.Millisecond

// recordPrefix starts the name of an election's record, keeping
// elections apart from other users of records (package schedlock).
const recordPrefix = "election:"

// Locker is what an election runs on: a dlock.Locker that can tell who
// holds a name and keep a record beside it. Every Locker of this module
// is one.
type Locker interface {
	dlock.Locker
	dlock.Inspector
	dlock.Recorder
}

// Election is one named election over a Locker: its candidates campaign
// for the name's lock, and its leader's term is the lock's fencing token.
// An Election is safe for concurrent use; every process that takes part
// makes its own, with the same name, on a Locker of the same servers.
type Election struct {
	l        Locker
	name     string
	handOver time.Duration
	interval time.Duration
	metrics  *metrics
}

// Option configures an Election.
type Option func(*Election) error

// WithHandOver sets how long Resign waits for the leader's work (started
// with Leadership.Go) to stop before it hands leadership over.
// DefaultHandOver by default.
func WithHandOver(d time.Duration) Option {
	return func(e *Election) error {
		if d <= 0 {
			return fmt.Errorf("election: WithHandOver(%v): not positive", d)
		}
		e.handOver = d
		return nil
	}
}

// WithObserveInterval sets how often Observe reads who leads on a Locker
// that does not push changes (dlock.Watcher), and how soon it retries a
// failed read: DefaultObserveInterval by default. A leader that led for
// less than the interval may go unseen; a change is never reported out
// of order.
func WithObserveInterval(d time.Duration) Option {
	return func(e *Election) error {
		if d <= 0 {
			return fmt.Errorf("election: WithObserveInterval(%v): not positive", d)
		}
		e.interval = d
		return nil
	}
}

// New returns the election called name on l. It does no I/O; a Locker
// that cannot inspect or keep records, an invalid name or option is an
// error at once.
func New(l dlock.Locker, name string, opts ...Option) (*Election, error) {
	if l == nil {
		return nil, errors.New("election: nil Locker")
	}
	el, ok := l.(Locker)
	if !ok {
		return nil, fmt.Errorf("election: %T cannot hold an election: it does not implement dlock.Inspector and dlock.Recorder", l)
	}
	if err := dlock.ValidateName(name); err != nil {
		return nil, fmt.Errorf("election: %w", err)
	}
	if err := dlock.ValidateName(recordPrefix + name); err != nil {
		return nil, fmt.Errorf("election: name of %d bytes: at most %d: %w", len(name), 255-len(recordPrefix), dlock.ErrInvalidName)
	}
	e := &Election{l: el, name: name, handOver: DefaultHandOver, interval: DefaultObserveInterval, metrics: newMetrics(l, name)}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("election: nil Option")
		}
		if err := opt(e); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// Name returns the election's name: the name of the lock its candidates
// campaign for.
func (e *Election) Name() string { return e.name }

// Campaign blocks until this candidate leads, then publishes value for
// followers to see (Leader, Observe) and returns the Leadership. ctx
// governs the wait: when it ends, Campaign returns an error wrapping
// dlock.ErrNotAcquired and ctx's error. A candidate whose connection or
// session is gone stops with the backend's error instead of waiting on.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if len(value) > dlock.MaxRecordValue {
		return nil, fmt.Errorf("election: campaign with a value of %d bytes: at most %d", len(value), dlock.MaxRecordValue)
	}
	lease, err := e.l.Lock(ctx, e.name)
	if err != nil {
		return nil, fmt.Errorf("election %q: campaign: %w", e.name, err)
	}
	if err := e.l.Record(ctx, recordPrefix+e.name, lease.Token(), []byte(value)); err != nil {
		unlock(lease)
		return nil, fmt.Errorf("election %q: publish the leader's value: %w", e.name, err)
	}
	return newLeadership(e, lease, value), nil
}

// unlock gives lease up with a context of its own: a campaign whose ctx
// ended must not leave leadership held.
func unlock(lease dlock.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), dlock.DefaultReleaseTimeout)
	defer cancel()
	_ = lease.Unlock(ctx) // a lease that cannot be released ends at its TTL
}

// Leader describes who leads an election.
type Leader struct {
	// Owner is the leader's owner id (its Locker's label and hold id).
	Owner string
	// Term is the leader's term: its lease's fencing token, larger than
	// every earlier leader's.
	Term uint64
	// Value is what the leader published (Campaign, Proclaim); empty in
	// the moment between winning and publishing.
	Value string
	// Since is when the leader was elected: the local clock less how long
	// the server's clock says it has led.
	Since time.Time
}

// Leader returns who leads, or ErrNoLeader. ctx governs the requests.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	for attempt := 0; ; attempt++ {
		h, held, err := e.l.Inspect(ctx, e.name)
		if err != nil {
			return Leader{}, fmt.Errorf("election %q: leader: %w", e.name, err)
		}
		if !held {
			return Leader{}, fmt.Errorf("%w of %q", ErrNoLeader, e.name)
		}
		r, ok, err := e.l.Recorded(ctx, recordPrefix+e.name)
		if err != nil {
			return Leader{}, fmt.Errorf("election %q: leader: %w", e.name, err)
		}
		if ok && r.Token == h.Token {
			return Leader{Owner: h.Owner, Term: h.Token, Value: string(r.Value), Since: time.Now().Add(-r.Age)}, nil
		}
		// The leader has not published yet, or a newer one won between
		// the two reads: read again, a few times.
		if attempt == publishWaits {
			return Leader{Owner: h.Owner, Term: h.Token}, nil
		}
		select {
		case <-ctx.Done():
			return Leader{}, fmt.Errorf("election %q: leader: %w", e.name, ctx.Err())
		case <-time.After(publishPause):
		}
	}
}

// How long Leader waits for a new leader to publish its value.
const (
	publishWaits = 20
	publishPause = 10 * time.Millisecond
)

// Observation is one change Observe reports: a new leader, a new value of
// the same leader, or a vacancy.
type Observation struct {
	// Leader is who leads; zero when Vacant.
	Leader Leader
	// Vacant reports that nobody leads.
	Vacant bool
}

// Observe reports who leads, at once and then at every change it sees,
// until ctx ends; then it closes the channel. A change is never reported
// out of order: no leader with a smaller term than one already reported.
// A reader too slow to receive misses intermediate changes, never the
// latest. Where the Locker is a dlock.Watcher (etcd, ZooKeeper), Observe
// reads at each change the server pushes, and every WatchFallback in
// case a watch was lost; elsewhere it reads every interval
// (WithObserveInterval), and a leader that led for less may go unseen.
// Reads that fail are retried at the next interval.
func (e *Election) Observe(ctx context.Context) <-chan Observation {
	out := make(chan Observation, 1)
	go e.observe(ctx, out)
	return out
}

// WatchFallback is how often Observe reads who leads on a Locker that
// pushes changes, in case a watch was lost without a word.
const WatchFallback = 10 * time.Second

func (e *Election) observe(ctx context.Context, out chan Observation) {
	defer close(out)
	o := observer{}
	w, pushes := e.l.(dlock.Watcher)
	var changes <-chan struct{} // nil: not watching (yet)
	for {
		if pushes && changes == nil {
			// Watching before the read: a change after it is pushed.
			if c, err := w.Watch(ctx, e.name, recordPrefix+e.name); err == nil {
				changes = c
			}
		}
		l, err := e.Leader(ctx)
		read := err == nil || errors.Is(err, ErrNoLeader)
		if read {
			if ob, changed := o.see(l, err == nil); changed {
				select {
				case out <- ob:
				case <-ctx.Done():
					return
				}
			}
		}
		wait := e.interval
		if changes != nil && read {
			wait = WatchFallback
		}
		if !e.await(ctx, wait, &changes) {
			return
		}
	}
}

// await waits for a pushed change, or for wait, and reports whether ctx
// is still live. A watch that ended is dropped (*changes becomes nil, to
// watch again), and the next read waits an interval more, so a watch
// the server keeps ending does not make Observe spin.
func (e *Election) await(ctx context.Context, wait time.Duration, changes *<-chan struct{}) bool {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case _, ok := <-*changes:
		if ok {
			return true
		}
		*changes = nil
		t.Reset(e.interval)
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	case <-t.C:
		return true
	}
}

// observer is Observe's memory: what it last reported.
type observer struct {
	started bool
	last    Observation
	term    uint64 // the largest term reported
}

// see returns the Observation to report for a read, if it is a change
// that does not go back in time.
func (o *observer) see(l Leader, led bool) (Observation, bool) {
	ob := Observation{Leader: l, Vacant: !led}
	switch {
	case led && l.Term < o.term:
		return Observation{}, false // a stale read: a newer leader was seen
	case o.started && ob.Vacant == o.last.Vacant && ob.Leader.Term == o.last.Leader.Term && ob.Leader.Value == o.last.Leader.Value:
		return Observation{}, false
	case led && l.Term == o.term && l.Value == "" && o.last.Leader.Value != "":
		return Observation{}, false // read before it published
	}
	o.started, o.last = true, ob
	o.term = max(o.term, l.Term)
	return ob, true
}

// Leadership is a won election: it lasts until Resign or until the lease
// behind it is lost, and Done closes then, before another candidate can
// win (the lease rule).
type Leadership struct {
	e      *Election
	lease  dlock.Lease
	ctx    context.Context
	cancel context.CancelCauseFunc
	work   sync.WaitGroup

	mu       sync.Mutex
	value    string
	resigned bool
}

func newLeadership(e *Election, lease dlock.Lease, value string) *Leadership {
	ctx, cancel := dlock.LeaseContext(context.Background(), lease)
	l := &Leadership{e: e, lease: lease, ctx: ctx, cancel: cancel, value: value}
	e.metrics.won(l)
	return l
}

// Term returns the leadership's term: the fencing token of its lease,
// larger than every earlier leader's. Pass it to the resources the leader
// writes, so that they refuse a deposed leader's late writes.
func (l *Leadership) Term() uint64 { return l.lease.Token() }

// Lease returns the lease behind the leadership: for its Deadline, and
// for Refresh on a Locker made WithoutAutoRenew. End leadership with
// Resign, not with the lease's Unlock, which does not wait for the work.
func (l *Leadership) Lease() dlock.Lease { return l.lease }

// Owner returns the leader's owner id, as Leader reports it.
func (l *Leadership) Owner() string { return l.lease.Owner() }

// Value returns the value last published.
func (l *Leadership) Value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.value
}

// Done is closed when leadership ends: at Resign, or when its lease is
// lost, before any other candidate can win.
func (l *Leadership) Done() <-chan struct{} { return l.lease.Done() }

// Err is nil while leading; afterwards ErrResigned, or why the lease was
// lost (wrapping dlock.ErrLost).
func (l *Leadership) Err() error {
	select {
	case <-l.lease.Done():
	default:
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.resigned {
		return ErrResigned
	}
	return l.lease.Err()
}

// Context returns a context that carries the leadership's lease and is
// cancelled when leadership ends (or when Resign begins), with the reason
// as its cause. Run the leader's work under it.
func (l *Leadership) Context() context.Context { return l.ctx }

// Go runs f on a goroutine of its own as the leader's work, with
// Context(). Resign waits for every such f to return before it hands
// leadership over (bounded by WithHandOver).
func (l *Leadership) Go(f func(ctx context.Context)) {
	l.work.Add(1)
	go func() {
		defer l.work.Done()
		f(l.ctx)
	}()
}

// Proclaim publishes value as the leader's, for followers to see. It
// fails, publishing nothing, once leadership has ended: a deposed
// leader's value never replaces its successor's (the record is fenced by
// the term). ctx governs the request.
func (l *Leadership) Proclaim(ctx context.Context, value string) error {
	if len(value) > dlock.MaxRecordValue {
		return fmt.Errorf("election: proclaim a value of %d bytes: at most %d", len(value), dlock.MaxRecordValue)
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("election %q: proclaim: leadership has ended: %w", l.e.name, err)
	}
	if err := l.e.l.Record(ctx, recordPrefix+l.e.name, l.Term(), []byte(value)); err != nil {
		return fmt.Errorf("election %q: proclaim: %w", l.e.name, err)
	}
	l.mu.Lock()
	l.value = value
	l.mu.Unlock()
	return nil
}

// Resign hands leadership over: it cancels Context, waits for the work
// started with Go to return (at most WithHandOver, and no longer than
// ctx allows), then releases the lock, so the next term starts only
// after the work has stopped or the bound has passed (then Resign's
// error wraps ErrWorkRunning). The release runs even when ctx has
// ended, bounded by dlock.DefaultReleaseTimeout. Resign after a loss
// returns why leadership was lost (wrapping dlock.ErrLost), so a leader
// learns that its work may have overlapped its successor's; Resign after
// Resign returns nil.
func (l *Leadership) Resign(ctx context.Context) error {
	l.mu.Lock()
	select {
	case <-l.lease.Done(): // ended already: nothing to hand over
		resigned := l.resigned
		l.mu.Unlock()
		l.cancel(l.lease.Err())
		if resigned {
			return nil
		}
		return fmt.Errorf("election %q: resign: leadership had ended: %w", l.e.name, l.lease.Err())
	default:
	}
	if l.resigned {
		l.mu.Unlock()
		return nil
	}
	l.resigned = true
	l.mu.Unlock()
	l.cancel(ErrResigned)
	var err error
	if !l.awaitWork(ctx) {
		err = ErrWorkRunning
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dlock.DefaultReleaseTimeout)
	defer cancel()
	if uerr := l.lease.Unlock(rctx); uerr != nil && !errors.Is(uerr, dlock.ErrNotHeld) {
		return errors.Join(err, fmt.Errorf("election %q: resign: %w", l.e.name, uerr))
	}
	if err != nil {
		return fmt.Errorf("election %q: resign: %w", l.e.name, err)
	}
	return nil
}

// awaitWork waits for the work started with Go to return, within the
// hand-over bound and ctx; it reports whether it did.
func (l *Leadership) awaitWork(ctx context.Context) bool {
	stopped := make(chan struct{})
	go func() {
		l.work.Wait()
		close(stopped)
	}()
	bound := time.NewTimer(l.e.handOver)
	defer bound.Stop()
	select {
	case <-stopped:
		return true
	case <-bound.C:
	case <-ctx.Done():
	}
	return false
}
