package cronlock_test

import (
	"log"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/dlockhq/dlock/schedlock"
	"github.com/dlockhq/dlock/schedlock/cronlock"
)

// Every instance runs the same cron; the wrapped job runs on one of them
// per firing.
func ExampleWrapper() {
	var runner *schedlock.Runner // schedlock.New(locker), on any dlock Locker
	lock, err := cronlock.Wrapper(runner, "billing/close-day", 10*time.Minute, time.Minute, nil)
	if err != nil {
		log.Fatal(err)
	}
	c := cron.New()
	if _, err := c.AddJob("0 0 * * *", cron.NewChain(lock).Then(cron.FuncJob(func() { /* the job */ }))); err != nil {
		log.Fatal(err)
	}
	c.Start()
	defer c.Stop()
}
