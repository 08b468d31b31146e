package gocronlock_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"

	"github.com/dlockhq/dlock"
	redislock "github.com/dlockhq/dlock/adapters/redis"
	"github.com/dlockhq/dlock/dlocktest"
	"github.com/dlockhq/dlock/election"
	"github.com/dlockhq/dlock/internal/testenv"
	"github.com/dlockhq/dlock/schedlock"
	"github.com/dlockhq/dlock/schedlock/gocronlock"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// locker is a Redis Locker of its own, as another process's would be.
func locker(t *testing.T) *redislock.Locker {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { c.Close() })
	l, err := redislock.New(c, dlock.WithTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return testenv.Closing(t, l)
}

// runLog records when each scheduler ran the job.
type runLog struct {
	mu   sync.Mutex
	runs []run
}

type run struct {
	at time.Time
	by int
}

func (l *runLog) add(by int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs = append(l.runs, run{time.Now(), by})
}

func (l *runLog) since(t time.Time) []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []run
	for _, r := range l.runs {
		if !r.at.Before(t) {
			out = append(out, r)
		}
	}
	return out
}

func scheduler(t *testing.T, opts ...gocron.SchedulerOption) gocron.Scheduler {
	s, err := gocron.NewScheduler(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown() })
	return s
}

// gocron issue 841: schedulers whose jobs fire at skewed times each take
// the lock the one before released, and a fast job runs once per
// scheduler. With lockAtLeastFor, three schedulers shifted by up to 120ms
// run a 500ms job once per period.
func TestLockerOncePerSlot(t *testing.T) {
	const (
		period  = 500 * time.Millisecond
		slots   = 10
		atLeast = period / 2
	)
	name := dlocktest.Name(t)
	start := time.Now().Add(time.Second)
	var log runLog
	for i := range 3 {
		runner, err := schedlock.New(locker(t))
		if err != nil {
			t.Fatal(err)
		}
		l, err := gocronlock.NewLocker(runner, time.Second, atLeast)
		if err != nil {
			t.Fatal(err)
		}
		s := scheduler(t, gocron.WithDistributedLocker(l))
		if _, err := s.NewJob(gocron.DurationJob(period), gocron.NewTask(func() { log.add(i) }),
			gocron.WithName(name), gocron.WithStartAt(gocron.WithStartDateTime(start.Add(time.Duration(i)*60*time.Millisecond)))); err != nil {
			t.Fatal(err)
		}
		s.Start()
	}
	time.Sleep(time.Until(start.Add(slots*period - period/2)))
	runs := log.since(start)
	if len(runs) < slots-2 || len(runs) > slots {
		t.Errorf("%d runs in %d periods, want one per period: %v", len(runs), slots, runs)
	}
	for i := 1; i < len(runs); i++ {
		if gap := runs[i].at.Sub(runs[i-1].at); gap < atLeast {
			t.Errorf("runs %v apart (schedulers %d and %d): the job ran twice in a period", gap, runs[i-1].by, runs[i].by)
		}
	}
}

// Only the leader's scheduler runs jobs; when it stops campaigning
// (Close), another scheduler takes over.
func TestElector(t *testing.T) {
	name := dlocktest.Name(t)
	var log runLog
	electors := make([]*gocronlock.Elector, 3)
	for i := range electors {
		e, err := election.New(locker(t), name)
		if err != nil {
			t.Fatal(err)
		}
		el, err := gocronlock.NewElector(e, fmt.Sprint("scheduler ", i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = el.Close(context.Background()) })
		electors[i] = el
		s := scheduler(t, gocron.WithDistributedElector(el))
		if _, err := s.NewJob(gocron.DurationJob(100*time.Millisecond), gocron.NewTask(func() { log.add(i) })); err != nil {
			t.Fatal(err)
		}
		s.Start()
	}
	leader := func() int {
		var who int
		dlocktest.Eventually(t, func() bool {
			n := 0
			for i, el := range electors {
				if el.IsLeader(context.Background()) == nil {
					who, n = i, n+1
				}
			}
			if n > 1 {
				t.Fatalf("%d schedulers lead at once", n)
			}
			return n == 1
		}, "a leader")
		return who
	}
	first := leader()
	since := time.Now()
	time.Sleep(time.Second)
	if by := runners(log.since(since)); !slices.Equal(by, []int{first}) {
		t.Fatalf("schedulers %v ran the job while %d led", by, first)
	}
	if err := electors[first].Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	second := leader()
	if second == first {
		t.Fatalf("scheduler %d still leads after Close", first)
	}
	since = time.Now()
	time.Sleep(time.Second)
	if by := runners(log.since(since)); !slices.Equal(by, []int{second}) {
		t.Fatalf("schedulers %v ran the job while %d led", by, second)
	}
}

func runners(runs []run) []int {
	var by []int
	for _, r := range runs {
		if !slices.Contains(by, r.by) {
			by = append(by, r.by)
		}
	}
	slices.Sort(by)
	return by
}
