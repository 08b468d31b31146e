// Package election is leader election over any dlock Locker: tablelock,
// advisory, Redis and ZooKeeper alike.
//
// Candidates campaign for the election's lock; the one that holds it
// leads, and its term is the lock's fencing token, larger than every
// earlier leader's. The leader publishes a value (Campaign, Proclaim) in
// a record fenced by the term (dlock.Recorder), which followers read
// (Leader) or watch (Observe). Leadership obeys dlock's lease rule: its
// Done closes, and its Context is cancelled, before any other candidate
// can win, whatever the leader's connection is doing; a leader frozen
// past its lease is replaced, and its writes fenced by its term are
// refused.
//
// Resign hands over: it cancels the leader's Context, waits (bounded, see
// WithHandOver) for the work started with Leadership.Go to return, and
// only then lets the next candidate win. A candidate whose connection or
// session is gone stops campaigning with the backend's error.
//
// Observe reads who leads at each change the server pushes where the
// Locker is a dlock.Watcher (etcd, ZooKeeper), and at an interval
// elsewhere (any Locker can be read, few can push): there a leader that
// led for less than the interval may go unseen. It never reports a
// change out of order.
package election
