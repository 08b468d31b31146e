package dlock

import "context"

// chainKey is the context key of the leases a call chain holds.
type chainKey struct{}

// chain is an immutable list of leases carried by a context.
type chain struct {
	lease *lease
	next  *chain
}

// ContextWithLease returns a copy of ctx that carries lease, so that a Lock
// or TryLock of the same name through the same Locker, made with the
// returned context (or one derived from it), re-enters lease's hold at once
// with the same token instead of waiting for it. This is how re-entry is
// bound to a call chain: Go has no goroutine identity to key it on, and a
// Locker is shared by every goroutine of a service. Do hands fn such a
// context. A MultiLease adds each of its parts. Leases of other Lockers
// are ignored. The returned context is not cancelled when the lease ends;
// Do's is.
func ContextWithLease(ctx context.Context, l Lease) context.Context {
	switch l := l.(type) {
	case *lease:
		head, _ := ctx.Value(chainKey{}).(*chain)
		return context.WithValue(ctx, chainKey{}, &chain{lease: l, next: head})
	case *MultiLease:
		for _, part := range l.leases {
			ctx = ContextWithLease(ctx, part)
		}
	}
	return ctx
}

// chainHold finds, among the leases ctx carries, a live hold of name by
// this Client (mine, which the call re-enters) or by a sibling Client
// (whose server-side owner the call takes, as the same owner). owner is
// the server-side owner id to use, "" for a fresh one.
func (c *Client) chainHold(ctx context.Context, name string) (mine *hold, owner string) {
	for link, _ := ctx.Value(chainKey{}).(*chain); link != nil; link = link.next {
		l := link.lease
		lc := l.client()
		if l.h.Name != name || lc.family != c.family || !l.h.st.live(l.h) {
			continue
		}
		if lc == c {
			return l.h, l.h.Owner
		}
		owner = l.h.Owner
	}
	return nil, owner
}
