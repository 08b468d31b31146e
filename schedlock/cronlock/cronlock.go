// Package cronlock plugs dlock into robfig/cron v3, which has no lock of
// its own: a JobWrapper that runs each job through package schedlock, so
// that across a fleet of cron instances a job runs once per slot, and
// skipped runs are logged, not run.
//
//	c := cron.New(cron.WithSeconds())
//	lock, err := cronlock.Wrapper(runner, "billing/close-day", 10*time.Minute, time.Minute, logger)
//	…
//	c.AddJob("0 */5 * * * *", cron.NewChain(lock).Then(job))
//
// A cron.Job has no context: Func makes a job that gets the run's context
// (cancelled when the lock is lost) and fencing token.
package cronlock

import (
	"context"
	"errors"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dlockhq/dlock/schedlock"
)

// Wrapper returns a cron.JobWrapper that runs the jobs it wraps as the
// job called name on r (see schedlock.Runner.Run for lockAtMostFor and
// lockAtLeastFor). logger (nil: none) gets an Info line for each skipped
// run and an Error line for each failed one. Bad arguments are an error
// at once.
func Wrapper(r *schedlock.Runner, name string, lockAtMostFor, lockAtLeastFor time.Duration, logger cron.Logger) (cron.JobWrapper, error) {
	if err := validate(r, name, lockAtMostFor, lockAtLeastFor); err != nil {
		return nil, err
	}
	return func(j cron.Job) cron.Job {
		return funcJob(r, name, lockAtMostFor, lockAtLeastFor, logger, func(context.Context, uint64) error {
			j.Run()
			return nil
		})
	}, nil
}

func validate(r *schedlock.Runner, name string, lockAtMostFor, lockAtLeastFor time.Duration) error {
	if r == nil {
		return errors.New("cronlock: nil Runner")
	}
	return r.Validate(name, lockAtMostFor, lockAtLeastFor)
}

// Func returns a cron.Job that runs job as the job called name on r, with
// the run's context and fencing token; logger as for Wrapper.
func Func(r *schedlock.Runner, name string, lockAtMostFor, lockAtLeastFor time.Duration, logger cron.Logger, job schedlock.Job) (cron.Job, error) {
	if err := validate(r, name, lockAtMostFor, lockAtLeastFor); err != nil {
		return nil, err
	}
	if job == nil {
		return nil, errors.New("cronlock: nil Job")
	}
	return funcJob(r, name, lockAtMostFor, lockAtLeastFor, logger, job), nil
}

func funcJob(r *schedlock.Runner, name string, lockAtMostFor, lockAtLeastFor time.Duration, logger cron.Logger, job schedlock.Job) cron.Job {
	return cron.FuncJob(func() {
		err := r.Run(context.Background(), name, job, lockAtMostFor, lockAtLeastFor)
		switch {
		case logger == nil || err == nil:
		case errors.Is(err, schedlock.ErrSkipped):
			logger.Info("skipped", "job", name, "reason", err.Error())
		default:
			logger.Error(err, "run failed", "job", name)
		}
	})
}
