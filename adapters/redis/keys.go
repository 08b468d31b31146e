package redislock

import "strings"

// Prefix starts every key dlock writes.
const Prefix = "dlock:"

// tagEscaper makes a name safe inside a hash tag: Redis Cluster hashes the
// text between the first '{' and the next '}', so neither may appear in
// it. The escape is reversible, so distinct names stay distinct keys.
var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// The suffixes of the keys that name a lock's channel and New's waiters
// (the notifier finds the lock's keys from its channel).
const (
	releasedSuffix    = ":released"
	lockWaitersSuffix = ":lock-waiters"
)

// keys are one lock's keys, built as they are asked for (a lock and
// unlock use two each); the hash tag puts them all in one cluster slot.
type keys struct{ tag string }

func keysFor(name string) keys {
	return keys{Prefix + "{" + tagEscaper.Replace(name) + "}"}
}

func (k keys) lock() string        { return k.tag }
func (k keys) fence() string       { return k.tag + ":fence" }
func (k keys) record() string      { return k.tag + ":record" } // dlock.Recorder
func (k keys) channel() string     { return k.tag + releasedSuffix }
func (k keys) lockWaiters() string { return k.tag + lockWaitersSuffix } // New's waiters
func (k keys) queue() string       { return k.tag + ":queue" }          // fair lock
func (k keys) timeouts() string    { return k.tag + ":queue-timeouts" }
func (k keys) waiters() string     { return k.tag + ":queue-waiters" }

// rwChannel is where a read-write lock's release wakes its waiters.
func (k keys) rwChannel() string { return k.tag + ":rw-released" }

// waiterPrefix + a fair Locker's channel id is the channel that wakes its
// waiter (see scripts/fair_queue.lua).
func (k keys) waiterPrefix() string { return k.tag + ":waiter:" }
