// Package faults is dlock's fault suite: it proves mutual exclusion, and
// that fencing saves the data, while lock holders and lock servers fail.
//
// Its tests (go test ./faults; make faults for more rounds) run worker
// processes in contention for one lock of each backend around a Resource,
// a counter row that checks fencing tokens, and inject:
//
//   - a holder paused with SIGSTOP between its read and its write for
//     longer than its TTL, then resumed;
//   - a holder killed with SIGKILL;
//   - latency on every worker's link, the holder's connections reset, and
//     the holder cut off (its packets dropped) for longer than its TTL,
//     through a toxiproxy proxy per worker;
//   - a Redis restart that loses every key, a ZooKeeper ensemble's
//     follower and leader killed and restarted, and throwaway PostgreSQL
//     and MariaDB servers crashed and restarted.
//
// Every call is recorded on the machine's monotonic clock (Now), and the
// history is checked by Check: linearizable for a mutex whose grants carry
// strictly increasing tokens (with porcupine). The suite also checks that
// a critical section is overtaken by the next holder's only when its own
// holder was told its lease ended (Unlock reported the loss) or died, and
// that the fenced counter counts every write it accepted.
//
// A lease is a lock with a time limit, so a paused holder does lose its
// lock while it does not run; what a correct lock owes it is that the next
// holder's token is larger and that the holder learns of the loss
// (Lease.Done, and Unlock returns ErrNotHeld or ErrLost). The suite shows
// the unfenced counter losing exactly the paused holders' updates that the
// fenced one refused.
package faults
