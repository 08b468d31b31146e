// Package schedlock runs scheduled jobs at most once per slot across a
// fleet: ShedLock's model on dlock's leases, over any Locker that keeps
// records (tablelock, advisory, Redis, ZooKeeper).
//
// Every node runs the same schedule and calls Run when it fires; the
// first node to take the job's lock runs it, the others skip it (or wait,
// WithWait). Two durations, as in ShedLock:
//
//   - lockAtMostFor bounds a run: its context is cancelled then. A node
//     that dies frees the slot when its lease runs out, so the Locker's
//     TTL may not exceed it; a live node's lease is renewed while the job
//     runs, however long.
//   - lockAtLeastFor keeps the slot closed that long after a run began,
//     by the lock server's clock, so that a node whose schedule fires a
//     little later (clock skew, a slow start) does not run a fast job a
//     second time. Choose it longer than the skew between nodes plus
//     how late a node may start a run, and shorter than the period less
//     that.
//
// The job gets the run's fencing token and a context cancelled when the
// lease is lost, before another node can take the slot (dlock's lease
// rule); Assert checks, deep in the job's code, that it still runs under
// its lock. On SQL the last run of each job is a row of dlock_records
// (package migrations).
//
// The adapters for the schedulers Go services use are in
// schedlock/gocronlock (go-co-op/gocron v2) and schedlock/cronlock
// (robfig/cron v3).
package schedlock
