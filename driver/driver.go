// Package driver is the seam between dlock's policy and a lock server, as
// database/sql/driver is for database/sql: the types a backend implements
// and dlock.Client drives. Users of locks never need it; implementers of a
// new backend do.
//
// A Backend makes single attempts and nothing more; dlock.Client (which a
// backend's Locker embeds, made with dlock.NewClient) adds waiting,
// re-entry, in-process queueing, renewal, the lease's deadline and loss
// signalling.
//
// Implementing a backend, the checklist:
//
//  1. Implement Backend, and each optional interface the server allows:
//     Notifier (the server can push a wake-up; LiveNotifier when it can
//     tell that a subscription is already in place), Blocker (it queues
//     waiters itself), Leaver (a queue the waiter must leave),
//     NameChecker (names it cannot take), SessionBound (holds end with a
//     session, not at a TTL), Transferer (a hold can pass to a new owner
//     in one request), DeadlineBound (its calls keep their ctx's
//     deadline), and dlock.Inspector and dlock.Identifier.
//  2. Assert each at compile time: var _ driver.Backend = (*T)(nil).
//  3. Wrap it in a Locker that embeds *dlock.Client (dlock.NewClient(b,
//     opts...)); take the backend's own settings as dlock.Options built
//     with dlock.WithSetting, at New and nowhere else.
//  4. Pass dlocktest.Run (and dlocktest.RunReadWrite for a read-write
//     lock) against a real server.
//  5. Name the server in internal/servers (its environment variable and
//     default), start it in scripts/services.sh, and reach it through
//     internal/testenv, so a missing server fails under
//     DLOCK_REQUIRE_SERVICES=1 instead of skipping.
//  6. Add a row to the fault suite (package faults: a backends entry) and
//     to make bench (BenchUncontended, BenchContended, BenchHerd).
package driver

import (
	"context"
	"errors"
	"time"
)

// Request is one attempt by Owner to take Name for TTL.
type Request struct {
	Name string
	// Owner is the server-side owner id of the hold being taken: unique to
	// this hold (Client draws a new one for every hold), or shared with a
	// sibling Client's live hold of the same call chain (see
	// dlock.Client.NewSibling). Retried attempts of one hold carry the same Owner.
	Owner string
	TTL   time.Duration
	// Wait is true for Lock's attempts, which will wait and try again, and
	// false for TryLock's. Fair backends queue only waiting attempts.
	Wait bool
	// Payload is a short printable text (dlock.WithPayload) a
	// PayloadKeeper stores with the hold when it takes it, and reports in
	// Inspect and List while the hold lasts; "" for none. Attempts of
	// other backends never carry one.
	Payload string
}

// Grant is the outcome of one acquire attempt.
type Grant struct {
	// Acquired reports whether Owner now holds the lock.
	Acquired bool
	// Token is the fencing token of the hold, when Acquired.
	Token uint64
	// Handle is backend state for the hold (a pinned connection, a node
	// path); it comes back in Hold.
	Handle any
	// Lost, when not nil, delivers the reason if the server ends the hold
	// on its own (a session expiry), so the lease ends at once rather than
	// at the next renewal.
	Lost <-chan error
	// Busy, when not Acquired, says the server turned the attempt away
	// because another attempt on the name was being decided at that
	// moment, not because an owner held the name: TryLock says so instead
	// of "held by another owner", and Lock tries again at once.
	Busy bool
	// RetryAfter is, when not Acquired, the holder's remaining lease by the
	// server's clock: a waiter tries again then at the latest. Zero when
	// unknown.
	RetryAfter time.Duration
	// Since and Term describe a grant the server made on the waiter's
	// behalf before this attempt (a fair lock's release that hands the
	// lock to the head of its queue and tells it so): the attempt then
	// returns it without a request. Since is when the waiter sent its
	// last request that the server had seen before granting, and Term
	// how long the server granted (when shorter than the request's
	// TTL): the lease's deadline counts from Since for Term, so it
	// precedes the server's expiry whenever the grant was made. Both
	// zero for a grant made by the attempt itself.
	Since time.Time
	Term  time.Duration
	// HeldBack, when not Acquired and its Resume is not zero, says the
	// server turned the attempt away not for a holder but because it
	// restarted lately and may have lost a hold whose holder still
	// believes it has it (dlock.ErrHeldBack). RetryAfter is when to try
	// again.
	HeldBack HoldBack
}

// HoldBack is a restarted server's hold-back of grants: Up is how long
// it has been up, Resume how long until it grants again.
type HoldBack struct {
	Up, Resume time.Duration
}

// Hold identifies a held lock to its backend.
type Hold struct {
	Name   string
	Owner  string
	Token  uint64
	TTL    time.Duration
	Handle any
}

// Backend is what a lock server supplies: single attempts, no policy.
// dlock.Client adds waiting, re-entry, renewal and loss signalling.
//
// What a failed or abandoned acquire may leave behind: nothing, once the
// dust settles. Client races every backend call against the caller's ctx
// and returns when ctx ends; it then releases a grant that arrives late,
// and after an Acquire that failed (its outcome unknown) it calls Release
// with Token 0 and a nil Handle, which must release whatever Owner holds of
// Name (Owner is unique to the hold, so nothing else is touched). A
// backend whose attempts cannot leave a hold behind (a failed attempt ends
// its session) returns nil for such a Release.
type Backend interface {
	// Acquire makes one attempt. It must not wait for another owner. An
	// owner that already holds the lock on the server re-enters it and gets
	// its current token.
	Acquire(ctx context.Context, r Request) (Grant, error)
	// Refresh extends h by h.TTL on the server's clock. It returns an
	// error wrapping dlock.ErrNotHeld when h is no longer held.
	Refresh(ctx context.Context, h Hold) error
	// Release gives h up (see above for Token 0 and a nil Handle). It
	// returns an error wrapping dlock.ErrNotHeld when h was no longer held, and
	// another error only when h may still be held on the server: Client
	// then retries the release in the background. ctx is never the
	// caller's: a release is not cancelled midway.
	Release(ctx context.Context, h Hold) error
}

// PayloadKeeper is implemented by backends that store a Request's
// Payload with the hold it grants (and hand it on with a Transfer's new
// hold), and report it as dlock.Holder.Payload.
type PayloadKeeper interface {
	// KeepsPayload reports whether the backend stores payloads.
	KeepsPayload() bool
}

// NameChecker is implemented by backends that refuse some names every
// other backend accepts (a ZooKeeper name that would land in the server's
// own tree). dlock.Client calls it, before any I/O, after dlock.ValidateName.
type NameChecker interface {
	// CheckName returns an error wrapping dlock.ErrInvalidName for a name the
	// backend cannot lock.
	CheckName(name string) error
}

// TTLBounded is implemented by backends whose server cannot keep a lease
// past some TTL (it holds the lease in a setting with a ceiling).
// dlock.NewClient refuses a longer TTL, before any I/O, and
// dlock.Client.MaxTTL reports the bound.
type TTLBounded interface {
	// MaxTTL is the longest TTL the backend's server keeps.
	MaxTTL() time.Duration
}

// Notifier is implemented by backends whose server can push a wake-up when
// a lock may have become free (pub/sub, LISTEN/NOTIFY, watches).
type Notifier interface {
	// Subscribe asks for wake-ups for r's waiter: the channel receives (it
	// is buffered, sends never block) each time r.Name may have become free
	// for it. Subscribe returns once wake-ups are guaranteed for every
	// release that happens after it; Client tries again right after it.
	// cancel ends the subscription. ctx governs the setup only.
	Subscribe(ctx context.Context, r Request) (wake <-chan struct{}, cancel func(), err error)
}

// DeadlineBound is implemented by a backend whose calls return by their
// ctx's deadline, within moments, whatever the server or the link does:
// its driver sets its I/O deadlines from ctx, waits for a connection no
// longer, and does not retry past it. Client then makes the short calls
// (an attempt that does not wait on the server; Unlock's release) on the
// caller's goroutine, each under dlock.CancelMargin or ctx's deadline,
// whichever is sooner, instead of handing each to a goroutine it can
// leave behind when ctx ends. A request that ran out of CancelMargin with
// the caller's ctx still live is made again through such a goroutine, so
// Acquire must be idempotent for a hold; a Release that finds the hold
// gone after one whose outcome was unknown counts as done when its answer
// comes before the lease's deadline (the server cannot have expired the
// hold yet), and as the lease having ended after it. A Blocker's
// AcquireWait, which waits for as long as ctx lets it, also runs on the
// caller's goroutine, with the caller's ctx: it must return within
// dlock.CancelMargin of ctx's end, its deadline or its cancellation.
type DeadlineBound interface {
	// BoundsCalls reports whether that holds for the backend as
	// configured; Client asks before each call.
	BoundsCalls() bool
}

// LiveNotifier is a Notifier that can tell, with no I/O, that wake-ups
// for a request are already guaranteed: the process's subscription that
// carries them is in place (another waiter uses it, or one did moments
// ago). Client then subscribes before its first attempt and, when that
// attempt misses, waits for a wake-up at once. A subscription made after
// the miss costs an attempt more, since a release between the miss and
// the subscription would be lost without it.
type LiveNotifier interface {
	Notifier
	// SubscribeLive is Subscribe when that needs no I/O, and otherwise
	// subscribes nothing and returns ok false.
	SubscribeLive(r Request) (wake <-chan struct{}, cancel func(), ok bool)
}

// Leaver is implemented by backends that keep waiters in a queue on the
// server (fair locks): Client calls Leave when a waiting Lock gives up, so
// the queue does not wait for the waiter's timeout.
type Leaver interface {
	// Leave removes r's waiter from the queue. It is best effort: a
	// waiter that is not removed leaves when its queue entry times out.
	Leave(ctx context.Context, r Request) error
}

// Blocker is implemented by backends whose server queues waiters itself
// (advisory locks). Client's Lock then calls AcquireWait instead of polling.
type Blocker interface {
	// AcquireWait waits on the server until the lock is held or ctx ends.
	// On a DeadlineBound backend it must return within dlock.CancelMargin
	// of ctx's end (see DeadlineBound); elsewhere Client returns by then
	// and leaves the call to finish on a goroutine of its own.
	AcquireWait(ctx context.Context, r Request) (Grant, error)
}

// SessionBound is implemented by backends whose holds end with a session
// (ZooKeeper nodes, advisory locks) instead of expiring on the server at
// their TTL. Client then retries a failed release until the backend says
// the hold is gone (its session ended) or it succeeds, never giving up
// while the session lives: a session-bound hold left behind would block
// its name until the process exits.
type SessionBound interface {
	// HoldsEndWithSession reports whether holds end only with the session.
	HoldsEndWithSession() bool
}

// DBSystem is implemented by backends that name their server for
// telemetry, as OpenTelemetry's db.system.name ("postgresql", "mysql",
// "redis", "zookeeper", "etcd").
type DBSystem interface {
	// DBSystem is the server's name, or "" while it is not known yet.
	DBSystem() string
}

// Sharer is implemented by backends whose holds of one name by different
// owners may coexist on the server (a read-write lock's read side). Client
// then gives every call chain a hold of its own, which waits on the server
// and never in the process: two readers sharing one Locker read side by
// side, as two Lockers' readers do.
type Sharer interface {
	// SharesHolds reports whether holds of one name may coexist.
	SharesHolds() bool
}

// Transferer is implemented by backends that can pass a held lock from one
// hold to a new owner in one request. Client uses it when the last lease
// of a hold ends while another call chain of the same Client waits for the
// name (see dlock.WithHandOffs): the next holder is granted without a
// release and a new acquire.
type Transferer interface {
	// Transfer ends h and grants h.Name to r.Owner for r.TTL in the same
	// request, with a fencing token larger than h's, as a successful
	// Acquire of r would; Grant.Term says when the server granted a
	// shorter first term (Since is unused). A Grant with Acquired false
	// and a nil error means the request changed nothing: h was no longer
	// held, its owner holds the lock more than once on the server (a
	// sibling's re-entry), or the backend would rather let a waiter of
	// another process in; Client then releases h as usual. An error
	// leaves the outcome unknown: Client releases both h and whatever
	// r.Owner may hold.
	Transfer(ctx context.Context, h Hold, r Request) (Grant, error)
}

// CancelBound is implemented by a DeadlineBound backend whose calls also
// end within moments of their ctx's cancellation, not only at its
// deadline: its driver watches ctx.Done (pgx and go-sql-driver/mysql
// through database/sql, gRPC). Client then makes every short call on its
// caller's goroutine; a DeadlineBound backend without it gets a worker
// for a call whose ctx may be cancelled long before its deadline.
type CancelBound interface {
	// EndsOnCancel reports whether that holds for the backend as
	// configured.
	EndsOnCancel() bool
}

// Revoker is implemented by backends where an attempt whose outcome the
// client did not learn (its ctx ended with the request sent, or its
// connection broke) may still be granted afterwards: a statement still
// running on the server for a connection the client has given up, a
// request still in a proxy's buffer. Client calls Revoke for such an
// attempt, instead of Release with no token, so that a call that
// reported failure leaves nothing held, whenever the server gets to the
// attempt.
type Revoker interface {
	// Revoke ends whatever r.Owner holds of r.Name, as a Release with
	// Token 0 does, and keeps every attempt of r.Owner for r.Name that
	// was sent before it from granting the lock afterwards, in whatever
	// order the server runs them. Owner ids are unique to a hold, and
	// Client makes no attempt with a revoked owner id. It returns nil
	// when the revocation is in place, whatever r.Owner held.
	Revoke(ctx context.Context, r Request) error
}

// ErrNoConnection is wrapped by a backend's error when its call ended,
// with its ctx, before it had a connection to send on (every connection
// of a bounded pool in use): the request was not sent, and the error
// says which setting bounds the pool.
var ErrNoConnection = errors.New("no free connection in the pool")
