package schedlock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/errjoin"
)

// Errors of package schedlock.
var (
	// ErrSkipped is returned by Run and Begin when the job's slot is
	// taken: another node runs the job, or ran it less than its
	// lockAtLeastFor ago by the server's clock.
	ErrSkipped = errors.New("schedlock: skipped")
	// ErrNotInRun is returned by Assert for a context that is not a live
	// run's.
	ErrNotInRun = errors.New("schedlock: not within a run of a job that holds its lock")
	// ErrLockAtMostFor is the cause of a run's context's cancellation when
	// the run has lasted lockAtMostFor.
	ErrLockAtMostFor = errors.New("schedlock: the run lasted lockAtMostFor")
)

// recordPrefix starts the name of a job's record, keeping jobs apart from
// other users of records (package election).
const recordPrefix = "schedlock:"

// Locker is what scheduled jobs lock with: a dlock.Locker that keeps
// records (dlock.Recorder). Every Locker of this module is one.
type Locker interface {
	dlock.Locker
	dlock.Recorder
}

// Runner runs jobs at most once per slot across the nodes that share its
// servers. It is safe for concurrent use.
type Runner struct {
	l       Locker
	wait    bool
	ttl     time.Duration // the Locker's TTL, when it tells it; 0 when not
	metrics *metrics
}

// Option configures a Runner.
type Option func(*Runner)

// WithWait makes Run and Begin wait for a taken slot, instead of skipping
// it: for the node that runs the job now to finish and for the slot's
// lockAtLeastFor to pass, then run. Waiters run one after another.
func WithWait() Option { return func(r *Runner) { r.wait = true } }

// New returns a Runner on l. It does no I/O; a Locker that keeps no
// records is an error at once.
func New(l dlock.Locker, opts ...Option) (*Runner, error) {
	if l == nil {
		return nil, errors.New("schedlock: nil Locker")
	}
	sl, ok := l.(Locker)
	if !ok {
		return nil, fmt.Errorf("schedlock: %T cannot lock scheduled jobs: it does not implement dlock.Recorder", l)
	}
	r := &Runner{l: sl, metrics: newMetrics(l)}
	if c, ok := l.(interface{ Config() dlock.Config }); ok {
		r.ttl = c.Config().TTL
	}
	for _, opt := range opts {
		if opt == nil {
			return nil, errors.New("schedlock: nil Option")
		}
		opt(r)
	}
	return r, nil
}

// Job is a scheduled job's work. ctx is cancelled when the run's lease is
// lost (before another node can take the slot), when lockAtMostFor has
// passed, or when Run's ctx ends; token is the run's fencing token, for
// the job's writes.
type Job func(ctx context.Context, token uint64) error

// Run runs job as the job called name, unless its slot is taken (then it
// returns an error wrapping ErrSkipped, or waits WithWait):
//
//   - the slot is taken while another node runs the job; the lock's
//     lease is renewed while job runs, so a long job keeps it, and a node
//     that dies frees it when the lease runs out (the Locker's TTL, which
//     must not exceed lockAtMostFor);
//   - after a run, the slot stays closed until lockAtLeastFor has passed
//     since the run began, by the lock server's clock, whichever node
//     asks: nodes whose schedules fire up to lockAtLeastFor apart run a
//     job once, however fast it is;
//   - the run's context is cancelled at lockAtMostFor; a job that ignores
//     it keeps the slot until it returns.
//
// Run returns job's error, joined with the loss (wrapping dlock.ErrLost)
// if the lease was lost while job ran. A panic in job ends the run and
// goes on. Bad arguments fail before any I/O. ctx governs the whole run.
func (r *Runner) Run(ctx context.Context, name string, job Job, lockAtMostFor, lockAtLeastFor time.Duration) (err error) {
	if job == nil {
		return errors.New("schedlock: Run: nil Job")
	}
	s, err := r.Begin(ctx, name, lockAtMostFor, lockAtLeastFor)
	if err != nil {
		return err
	}
	defer func() {
		s.failed = err != nil
		err = errjoin.Join(err, s.End(ctx))
	}()
	return job(s.Context(), s.Token())
}

// Begin takes the job's slot as Run does, for schedulers that run the job
// themselves (the gocron and robfig/cron adapters): run the job under
// Slot.Context, then call End. It returns an error wrapping ErrSkipped
// when the slot is taken.
func (r *Runner) Begin(ctx context.Context, name string, lockAtMostFor, lockAtLeastFor time.Duration) (*Slot, error) {
	if err := r.check(ctx, name, lockAtMostFor, lockAtLeastFor); err != nil {
		return nil, err
	}
	lock := r.l.TryLock
	if r.wait {
		lock = r.l.Lock
	}
	lease, err := lock(ctx, name)
	if errors.Is(err, dlock.ErrHeldBack) && !r.wait {
		r.metrics.run(name, "skipped")
		return nil, fmt.Errorf("%w: job %q: %w", ErrSkipped, name, err)
	}
	if errors.Is(err, dlock.ErrNotAcquired) && !r.wait {
		r.metrics.run(name, "skipped")
		return nil, fmt.Errorf("%w: job %q is running on another node", ErrSkipped, name)
	}
	if err != nil {
		return nil, fmt.Errorf("schedlock: job %q: %w", name, err)
	}
	if err := r.open(ctx, name, lease, lockAtLeastFor); err != nil {
		unlock(lease)
		if errors.Is(err, ErrSkipped) {
			r.metrics.run(name, "skipped")
		}
		return nil, err
	}
	r.metrics.run(name, "started")
	s := newSlot(ctx, name, lease, lockAtMostFor)
	s.metrics = r.metrics
	return s, nil
}

func (r *Runner) check(ctx context.Context, name string, atMost, atLeast time.Duration) error {
	if ctx == nil {
		return errors.New("schedlock: nil Context")
	}
	return r.Validate(name, atMost, atLeast)
}

// Validate returns the error Run and Begin would return, before any I/O,
// for these arguments: for schedulers' adapters, which take them once and
// run the job many times.
func (r *Runner) Validate(name string, atMost, atLeast time.Duration) error {
	switch {
	case atMost <= 0:
		return fmt.Errorf("schedlock: job %q: lockAtMostFor %v: not positive", name, atMost)
	case atLeast < 0 || atLeast > atMost:
		return fmt.Errorf("schedlock: job %q: lockAtLeastFor %v: not between 0 and lockAtMostFor (%v)", name, atLeast, atMost)
	case r.ttl > atMost && atMost < dlock.MinTTL:
		return fmt.Errorf("schedlock: job %q: lockAtMostFor %v is shorter than dlock.MinTTL (%v), the shortest TTL a Locker takes: make it at least %v", name, atMost, dlock.MinTTL, dlock.MinTTL)
	case r.ttl > atMost:
		return fmt.Errorf("schedlock: job %q: lockAtMostFor %v is shorter than the Locker's TTL %v, for which a node that dies keeps the slot: make the Locker WithTTL(%v) or less", name, atMost, r.ttl, atMost)
	}
	if err := dlock.ValidateName(name); err != nil {
		return fmt.Errorf("schedlock: %w", err)
	}
	if err := dlock.ValidateName(recordPrefix + name); err != nil {
		return fmt.Errorf("schedlock: job name of %d bytes: at most %d: %w", len(name), 255-len(recordPrefix), dlock.ErrInvalidName)
	}
	return nil
}

// lastRun is a job's record: when its last run began (the record's age)
// and how long that run keeps the slot closed. JSON, so that a DBA
// reading dlock_records sees what it says.
type lastRun struct {
	ClosedForMS int64  `json:"closed_for_ms"`
	By          string `json:"by"`
}

// open checks, holding the job's lock, that its slot is open, waiting for
// it WithWait, and records that a run begins.
func (r *Runner) open(ctx context.Context, name string, lease dlock.Lease, atLeast time.Duration) error {
	for {
		rec, ok, err := r.l.Recorded(ctx, recordPrefix+name)
		if err != nil {
			return fmt.Errorf("schedlock: job %q: read its last run: %w", name, err)
		}
		left := time.Duration(0)
		if ok {
			var last lastRun
			if err := json.Unmarshal(rec.Value, &last); err != nil {
				return fmt.Errorf("schedlock: job %q: malformed record of its last run %q: %w", name, rec.Value, err)
			}
			left = time.Duration(last.ClosedForMS)*time.Millisecond - rec.Age
		}
		if left <= 0 {
			break
		}
		if !r.wait {
			return fmt.Errorf("%w: job %q ran %v ago; its slot is closed for %v more", ErrSkipped, name, rec.Age.Round(time.Millisecond), left.Round(time.Millisecond))
		}
		select {
		case <-time.After(left):
		case <-lease.Done():
			return fmt.Errorf("schedlock: job %q: waiting for its slot: %w", name, lease.Err())
		case <-ctx.Done():
			return fmt.Errorf("schedlock: job %q: waiting for its slot: %w", name, ctx.Err())
		}
	}
	value, _ := json.Marshal(lastRun{ClosedForMS: atLeast.Milliseconds(), By: lease.Owner()}) // cannot fail
	if err := r.l.Record(ctx, recordPrefix+name, lease.Token(), value); err != nil {
		return fmt.Errorf("schedlock: job %q: record its run: %w", name, err)
	}
	return nil
}

// unlock gives lease up with a context of its own, so that a run whose ctx
// ended leaves no lock held. A release that fails is retried by the
// Locker, and the lock ends at its TTL at the latest.
func unlock(lease dlock.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), dlock.DefaultReleaseTimeout)
	defer cancel()
	_ = lease.Unlock(ctx)
}

// Slot is a run of a job: its lock held, its slot recorded.
type Slot struct {
	name   string
	lease  dlock.Lease
	ctx    context.Context
	cancel context.CancelCauseFunc
	end    sync.Once
	err    error // End's
	// failed is set by Run when the job returned an error; metrics counts
	// the run's end.
	failed  bool
	metrics *metrics
}

type runKey struct{}

func newSlot(ctx context.Context, name string, lease dlock.Lease, atMost time.Duration) *Slot {
	work, cancelLease := dlock.LeaseContext(ctx, lease)
	work, cancelDeadline := context.WithTimeoutCause(work, atMost, ErrLockAtMostFor)
	s := &Slot{name: name, lease: lease}
	s.ctx = context.WithValue(work, runKey{}, s)
	s.cancel = func(cause error) {
		cancelDeadline()
		cancelLease(cause)
	}
	return s
}

// Token is the run's fencing token.
func (s *Slot) Token() uint64 { return s.lease.Token() }

// Context is the run's context: cancelled when the lease is lost, at
// lockAtMostFor, or when Begin's ctx ends. Assert accepts it.
func (s *Slot) Context() context.Context { return s.ctx }

// Done is closed when the run's lease ends: at End, or lost.
func (s *Slot) Done() <-chan struct{} { return s.lease.Done() }

// End ends the run and releases the job's lock; the slot stays closed
// until lockAtLeastFor has passed since the run began. It reports the
// loss (wrapping dlock.ErrLost) if the lease was lost during the run.
// The release runs even when ctx has ended, bounded by
// dlock.DefaultReleaseTimeout. End twice returns the first End's error.
func (s *Slot) End(ctx context.Context) error {
	s.end.Do(func() { s.err = s.release(ctx) })
	return s.err
}

func (s *Slot) release(ctx context.Context) error {
	lost := s.lease.Err() != nil && !errors.Is(s.lease.Err(), dlock.ErrUnlocked)
	s.metrics.ended(s, lost)
	s.cancel(nil)
	if lost {
		return fmt.Errorf("schedlock: job %q: %w", s.name, s.lease.Err())
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dlock.DefaultReleaseTimeout)
	defer cancel()
	if err := s.lease.Unlock(rctx); err != nil {
		return fmt.Errorf("schedlock: job %q: %w", s.name, err)
	}
	return nil
}

// Assert returns nil when ctx is a run's context (Slot.Context, or the
// ctx Run hands its Job) whose lease is held, and otherwise an error
// wrapping ErrNotInRun or the loss: for code that must run only under its
// job's lock.
func Assert(ctx context.Context) error {
	s, ok := ctx.Value(runKey{}).(*Slot)
	if !ok {
		return ErrNotInRun
	}
	select {
	case <-s.lease.Done():
		return fmt.Errorf("%w: job %q: %w", ErrNotInRun, s.name, s.lease.Err())
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: job %q: %w", ErrNotInRun, s.name, context.Cause(ctx))
	}
	return nil
}
