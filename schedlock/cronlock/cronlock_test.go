package cronlock_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/robfig/cron/v3"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/schedlock"
	"github.com/dlockhq/dlock/schedlock/cronlock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func runner(t *testing.T) *schedlock.Runner {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { c.Close() })
	l, err := redislock.New(c, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	r, err := schedlock.New(testenv.Closing(t, l))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// skips counts the skipped runs the wrapper logs.
type skips struct {
	mu   sync.Mutex
	n    int
	errs []error
}

func (s *skips) Info(msg string, _ ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if msg == "skipped" {
		s.n++
	}
}

func (s *skips) Error(err error, _ string, _ ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs = append(s.errs, err)
}

// Three cron instances fire the same every-second job at the same
// moments (robfig/cron issue 476: it has no lock); wrapped, each second
// runs it once, and the others log a skip.
func TestWrapperOncePerSecond(t *testing.T) {
	name := dlocktest.Name(t)
	var (
		mu   sync.Mutex
		runs = map[int64]int{} // unix second → runs
	)
	var log skips
	for range 3 {
		lock, err := cronlock.Wrapper(runner(t), name, time.Second, 500*time.Millisecond, &log)
		if err != nil {
			t.Fatal(err)
		}
		c := cron.New(cron.WithSeconds())
		if _, err := c.AddJob("* * * * * *", cron.NewChain(lock).Then(cron.FuncJob(func() {
			mu.Lock()
			defer mu.Unlock()
			runs[time.Now().Unix()]++
		}))); err != nil {
			t.Fatal(err)
		}
		c.Start()
		t.Cleanup(func() { <-c.Stop().Done() })
	}
	time.Sleep(4500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(runs) < 3 {
		t.Errorf("the job ran in %d seconds of 4", len(runs))
	}
	for sec, n := range runs {
		if n != 1 {
			t.Errorf("second %d: %d runs, want 1", sec, n)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if log.n < len(runs) {
		t.Errorf("%d skips logged for %d runs of three instances", log.n, len(runs))
	}
	for _, err := range log.errs {
		t.Errorf("a run failed: %v", err)
	}
}

// Func hands the job the run's context, which schedlock.Assert accepts,
// and its token.
func TestFunc(t *testing.T) {
	var got error
	var token uint64
	j, err := cronlock.Func(runner(t), dlocktest.Name(t), time.Second, 0, nil, func(ctx context.Context, tok uint64) error {
		got, token = schedlock.Assert(ctx), tok
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	j.Run()
	if got != nil || token == 0 {
		t.Fatalf("the job ran with Assert = %v and token %d", got, token)
	}
}

// Bad arguments fail when the job is made, not at each run.
func TestBadArguments(t *testing.T) {
	r := runner(t)
	for what, err := range map[string]error{
		"nil Runner":       func() error { _, err := cronlock.Wrapper(nil, "x", time.Second, 0, nil); return err }(),
		"empty name":       func() error { _, err := cronlock.Wrapper(r, "", time.Second, 0, nil); return err }(),
		"lockAtMostFor 0":  func() error { _, err := cronlock.Func(r, "x", 0, 0, nil, nil); return err }(),
		"nil Job":          func() error { _, err := cronlock.Func(r, "x", time.Second, 0, nil, nil); return err }(),
		"atLeast > atMost": func() error { _, err := cronlock.Wrapper(r, "x", time.Second, 2*time.Second, nil); return err }(),
		"atMost < the TTL": func() error { _, err := cronlock.Wrapper(r, "x", time.Millisecond, 0, nil); return err }(),
	} {
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want a one-line error", what, err)
		}
	}
}
