// Package faults is dlock's fault suite: it proves mutual exclusion, and
// that fencing saves the data, while lock holders are killed and paused.
//
// Its tests (go test ./faults, or make faults for more rounds) run worker
// processes in contention for one lock of each backend around a Resource,
// a counter row that checks fencing tokens. Each round the suite pauses a
// holder with SIGSTOP between its read and its write for longer than its
// TTL, then resumes it, and kills another holder with SIGKILL. Every call
// is recorded on the machine's monotonic clock (Now), and the history is
// checked by Check: linearizable for a mutex whose grants carry strictly
// increasing tokens (with porcupine), and the fenced counter must count
// every write it accepted.
//
// A lease is a lock with a time limit, so a paused holder does lose its
// lock while it does not run; what a correct lock owes it is that the next
// holder's token is larger and that the holder learns of the loss
// (Lease.Done, and Unlock returns ErrNotHeld or ErrLost). The suite shows
// the unfenced counter losing exactly the paused holders' updates that the
// fenced one refused.
package faults
