// The order of each primitive's queue: how its nodes are named, which
// node a waiter waits for, and which node holds. A mutex, a read-write
// lock's two sides and a semaphore's leases each queue in a directory of
// their own, in an order of their own.

package zklock

import (
	"slices"
	"strings"
)

// order is one primitive's queue discipline.
type order interface {
	// kind names the primitive ("lock", "read", "write", "lease").
	kind() string
	// tag is what follows the protected GUID in owner's node name (the
	// server appends the sequence); q is the queue as last read, for an
	// order whose tag depends on it (readsFirst).
	tag(q []string, owner string) string
	// blocker returns the node of q that node i (owner's) must wait for,
	// "" when it may hold now, or requeue.
	blocker(q []string, i int, owner string) string
	// holder returns the index in q of a node that holds, or -1.
	holder(q []string) int
	// readsFirst says the queue is read before a node is made (its tag
	// depends on it).
	readsFirst() bool
	// rereads says a view of the queue kept by deletion events is read
	// again before the waiter holds: nodes may have joined ahead of it.
	rereads() bool
	// shares says holds of one name coexist (driver.Sharer).
	shares() bool
}

// requeue is what blocker returns for a downgrade node whose owner no
// longer held the write lock when it was made: it joins the queue again as
// a plain reader.
const requeue = "\x00requeue"

// mutex is the lock recipe: each node waits for its predecessor; the
// first holds. A semaphore's mutex is one too.
type mutex struct{}

func (mutex) kind() string                { return "lock" }
func (mutex) tag([]string, string) string { return "lock" }
func (mutex) readsFirst() bool            { return false }
func (mutex) rereads() bool               { return false }
func (mutex) shares() bool                { return false }
func (mutex) holder(q []string) int       { return min(len(q), 1) - 1 }
func (mutex) blocker(q []string, i int, _ string) string {
	if i > 0 {
		return q[i-1]
	}
	return ""
}

// writer is a read-write lock's write side: a mutex that also waits for
// any downgrade reader (a reader its owner took under its write lock),
// and whose kept view is read again before it holds (a downgrade reader
// may have joined behind it and now stands before it).
type writer struct{}

func (writer) kind() string { return "write" }
func (writer) tag(_ []string, owner string) string {
	return "write-" + ownerTag(owner)
}
func (writer) readsFirst() bool { return false }
func (writer) rereads() bool    { return true }
func (writer) shares() bool     { return false }
func (writer) holder(q []string) int {
	if len(q) > 0 && strings.Contains(q[0], "-write-") {
		return 0
	}
	return -1 // readers hold it
}
func (writer) blocker(q []string, i int, _ string) string {
	if i > 0 {
		return q[i-1]
	}
	if j := slices.IndexFunc(q, isDowngrade); j >= 0 {
		return q[j]
	}
	return ""
}

// reader is a read-write lock's read side: a reader waits only for the
// nearest writer before it that is not its own owner's. A reader whose
// owner holds the write lock (the first node of q) reads at once, ahead
// of other owners' queued writers, or it and they would wait for each
// other (a downgrade): its node is marked as such, and every writer waits
// for a marked node wherever it stands in the queue.
type reader struct{}

func (reader) kind() string     { return "read" }
func (reader) readsFirst() bool { return true }
func (reader) rereads() bool    { return false }
func (reader) shares() bool     { return true }
func (reader) tag(q []string, owner string) string {
	if ownsWrite(q, owner) {
		return "read-" + ownerTag(owner) + downgradeMark
	}
	return "read-" + ownerTag(owner)
}
func (r reader) holder(q []string) int {
	i := slices.IndexFunc(q, func(n string) bool { return strings.Contains(n, "-read-") })
	if i == 0 {
		return 0
	}
	if i < 0 || r.blocker(q, i, "") != "" {
		return -1 // a writer holds it
	}
	return i
}
func (reader) blocker(q []string, i int, owner string) string {
	if isDowngrade(q[i]) {
		if ownsWrite(q, owner) {
			return ""
		}
		return requeue
	}
	mine := "-write-" + ownerTag(owner) + "-"
	for j := i - 1; j >= 0; j-- {
		if strings.Contains(q[j], "-write-") && !strings.Contains(q[j], mine) {
			return q[j]
		}
	}
	return ""
}

// leases is a semaphore's lease nodes, which the semaphore counts itself
// (see Semaphore.lease): no node waits for another.
type leases struct{}

func (leases) kind() string                         { return "lease" }
func (leases) tag(_ []string, owner string) string  { return "lease-" + ownerTag(owner) }
func (leases) readsFirst() bool                     { return false }
func (leases) rereads() bool                        { return false }
func (leases) shares() bool                         { return true }
func (leases) holder([]string) int                  { return -1 }
func (leases) blocker([]string, int, string) string { return "" }

// downgradeMark ends the tag of a reader's node taken under its owner's
// write lock.
const downgradeMark = "-g"

func isDowngrade(node string) bool {
	return strings.Contains(node, "-read-") && strings.Contains(node, downgradeMark+"-")
}

// ownsWrite reports whether owner holds the write lock in queue q.
func ownsWrite(q []string, owner string) bool {
	return len(q) > 0 && strings.Contains(q[0], "-write-"+ownerTag(owner)+"-")
}
