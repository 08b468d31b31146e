package gocronlock_test

import (
	"log"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/dlockhq/dlock/schedlock"
	"github.com/dlockhq/dlock/schedlock/gocronlock"
)

// Every instance of a service schedules the same jobs; each run takes its
// slot through schedlock, so a job runs on one instance per period.
func ExampleNewLocker() {
	var runner *schedlock.Runner // schedlock.New(locker), on any dlock Locker
	locker, err := gocronlock.NewLocker(runner, 10*time.Minute, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(func() { /* the job */ }),
		gocron.WithName("reports/hourly"))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
}
