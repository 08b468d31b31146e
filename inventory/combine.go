package inventory

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/dlockhq/dlock/internal/sqldialect"
)

// batchTimeout bounds one combining transaction: the callers whose
// requests it carries may have left (their outcomes stay recorded).
const batchTimeout = 30 * time.Second

// batcher is one item's combining queue in a process: Reserves for the
// item wait in queue while a transaction for an earlier batch runs, and
// go together in the next. At most one transaction per item per process
// is in flight; the database sees one client per process for the item.
type batcher struct {
	s   *Store
	sku string
	// bucket is, for a bucketed item, the bucket this process's batches
	// take from, drawn at random (0: draw again); only the goroutine
	// running batches uses it.
	bucket int

	mu      sync.Mutex
	queue   []*pending
	running bool // a goroutine runs batches until queue is empty
}

// pending is one queued Reserve.
type pending struct {
	ctx context.Context
	r   Request
	// verdict, when not empty, is the reason the request is rejected
	// without a look at the stock (the redis strategy's gate decided it).
	verdict string
	done    chan outcomeOf // buffered: the batch never waits for its caller
}

type outcomeOf struct {
	res Reservation
	err error
	// fresh: the batch recorded this outcome, rather than finding it
	// recorded by an earlier attempt of the request.
	fresh bool
}

func (s *Store) batcher(sku string) *batcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.batchers[sku]
	if b == nil {
		b = &batcher{s: s, sku: sku}
		s.batchers[sku] = b
	}
	return b
}

// reserve queues r and waits for its batch's outcome, or ctx. A request
// whose ctx ends before its batch begins is dropped; one whose batch has
// begun is decided by it, and a retry with its request id learns how.
func (b *batcher) reserve(ctx context.Context, r Request, verdict string) outcomeOf {
	p := &pending{ctx: ctx, r: r, verdict: verdict, done: make(chan outcomeOf, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, p)
	start := !b.running
	b.running = true
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case o := <-p.done:
		return o
	case <-ctx.Done():
		return outcomeOf{err: fmt.Errorf("inventory: reserve %q: %w (retry the request id to learn its outcome)", r.RequestID, ctx.Err())}
	}
}

// run runs batches until the queue is empty.
func (b *batcher) run() {
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.s.maxBatch)
		if n == 0 {
			b.running = false
			b.queue = nil
			b.mu.Unlock()
			return
		}
		batch := slices.Clone(b.queue[:n])
		b.queue = b.queue[n:]
		b.mu.Unlock()
		b.runBatch(batch)
	}
}

// runBatch decides batch: in one transaction, or, when that fails for a
// request another process recorded meanwhile or a deadlock, one request
// at a time as the atomic strategy does. Of a bucketed item, requests the
// batch's bucket is short of are decided one at a time too, with a
// rebalance, and the next batch draws another bucket.
func (b *batcher) runBatch(batch []*pending) {
	var live []*pending
	for _, p := range batch {
		if p.ctx.Err() == nil {
			live = append(live, p)
		}
	}
	if len(live) == 0 {
		return
	}
	uniq := distinct(live)
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	info, err := b.s.info(ctx, b.sku) // known: the Reserves that queued the batch read it
	var got map[string]outcomeOf
	var short, alone []*pending
	if err == nil {
		got, short, err = b.decide(ctx, uniq, info)
	}
	if err == nil && len(short) > 0 {
		if err = b.rebalance(ctx, short, info, got); retryAlone(err) {
			alone, err = short, nil
		}
	}
	if retryAlone(err) {
		got, alone, err = map[string]outcomeOf{}, uniq, nil
	}
	for _, p := range alone {
		res, err := b.s.reserveAlone(ctx, p.r, info)
		got[p.r.RequestID] = outcomeOf{res: res, err: err}
	}
	for _, p := range live {
		p.done <- answer(p, got[p.r.RequestID], err)
	}
}

// retryAlone: a batch that failed with err is decided again one request
// at a time (a request another process recorded meanwhile, a deadlock).
func retryAlone(err error) bool {
	return err != nil && (sqldialect.Duplicate(err) || sqldialect.Deadlock(err))
}

// rebalance decides reqs, which the batch's bucket was short of, in one
// transaction over all the item's buckets: a sum read without locks
// that is 0 rejects them without a lock; otherwise every bucket is
// locked in order, the requests granted from the sum and what is left
// spread evenly over the buckets. The next batch draws a bucket again.
func (b *batcher) rebalance(ctx context.Context, reqs []*pending, info itemInfo, got map[string]outcomeOf) error {
	s := b.s
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }() // after Commit, a no-op
	drawn := 1 + rand.IntN(info.buckets)
	g := grant{limit: info.limit, bucket: drawn, whole: true, held: map[int64]int64{}, added: map[int64]int64{}}
	if g.pool, g.available, err = lockPool(ctx, tx, s.q, b.sku, drawn, 1); err != nil {
		return err
	}
	if g.pool != nil && g.limit > 0 {
		if err := g.lockUsers(ctx, tx, s.q, b.sku, reqs); err != nil {
			return err
		}
	}
	decided, rows, _ := g.decide(reqs, s.ttl)
	if err := g.apply(ctx, tx, s.q, b.sku); err != nil {
		return err
	}
	if err := b.record(ctx, tx, decided, rows, got); err != nil {
		return err
	}
	return tx.Commit()
}

// distinct keeps the first of each request id: copies of a request in a
// batch (a client retrying while the first is queued) share its outcome.
func distinct(live []*pending) []*pending {
	seen := map[string]bool{}
	var uniq []*pending
	for _, p := range live {
		if !seen[p.r.RequestID] {
			seen[p.r.RequestID] = true
			uniq = append(uniq, p)
		}
	}
	return uniq
}

// answer is p's outcome: o, the batch's error, or ErrRequestReused when
// the outcome recorded under p's id is another request's.
func answer(p *pending, o outcomeOf, err error) outcomeOf {
	switch {
	case err != nil:
		return outcomeOf{err: fmt.Errorf("inventory: reserve %q: %w", p.r.RequestID, err)}
	case o.err == nil && (o.res.UserID != p.r.UserID || o.res.Qty != p.r.Qty || o.res.SKU != p.r.SKU):
		return outcomeOf{err: fmt.Errorf("%w: %q reserved %d of %q for user %d", ErrRequestReused, p.r.RequestID, o.res.Qty, o.res.SKU, o.res.UserID)}
	}
	return o
}

// decide runs one transaction for reqs (distinct request ids): it finds
// the outcomes recorded before, locks the item's row (of a bucketed item,
// the batch's bucket's), then the users' rows, grants requests in order
// while stock and limits allow, takes the granted units in one UPDATE and
// records every outcome in one INSERT. It returns the requests a bucket
// was short of, undecided.
func (b *batcher) decide(ctx context.Context, reqs []*pending, info itemInfo) (got map[string]outcomeOf, short []*pending, err error) {
	s := b.s
	got = make(map[string]outcomeOf, len(reqs))
	if err := s.collect(ctx, s.db, s.q.byRequests(len(reqs)), requestIDs(reqs), got); err != nil {
		return nil, nil, err
	}
	var fresh []*pending
	for _, p := range reqs {
		if _, seen := got[p.r.RequestID]; !seen {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) == 0 {
		return got, nil, nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = tx.Rollback() }() // after Commit, a no-op
	g := grant{limit: info.limit, whole: info.buckets == 0, held: map[int64]int64{}, added: map[int64]int64{}}
	if info.buckets > 0 {
		if b.bucket == 0 {
			b.bucket = 1 + rand.IntN(info.buckets)
		}
		g.bucket = b.bucket
	}
	if err := g.lock(ctx, tx, s.q, b.sku, fresh); err != nil {
		return nil, nil, err
	}
	decided, rows, short := g.decide(fresh, s.ttl)
	if len(short) > 0 {
		b.bucket = 0
	}
	if len(decided) == 0 {
		return got, short, nil
	}
	if err := g.apply(ctx, tx, s.q, b.sku); err != nil {
		return nil, nil, err
	}
	if err := b.record(ctx, tx, decided, rows, got); err != nil {
		return nil, nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, err
	}
	for _, p := range decided {
		o := got[p.r.RequestID]
		o.fresh = true
		got[p.r.RequestID] = o
	}
	return got, short, nil
}

func requestIDs(reqs []*pending) []any {
	ids := make([]any, len(reqs))
	for i, p := range reqs {
		ids[i] = p.r.RequestID
	}
	return ids
}

// grant is one batch's decision, made under the item's row lock.
type grant struct {
	limit  int
	bucket int // of a bucketed item, the bucket locked (or, with pool, drawn)
	// whole: available is all the item has (its row's, or its buckets'
	// sum): a request short of it is sold out, not short of one bucket.
	whole     bool
	pool      *pool           // the buckets, when all are locked
	available int64           // the item's (bucket's), as locked
	users     []int64         // the batch's users, sorted (the lock order)
	held      map[int64]int64 // units each user holds, as locked
	taken     int64           // units granted
	added     map[int64]int64 // units granted to each user
}

// lock locks the item's row, then its users' rows, for the requests the
// stock decides (those without a verdict): a batch of rejections only
// leaves the item's row alone.
func (g *grant) lock(ctx context.Context, tx *sql.Tx, q *queries, sku string, fresh []*pending) error {
	var open []*pending
	for _, p := range fresh {
		if p.verdict == "" {
			open = append(open, p)
		}
	}
	if len(open) == 0 {
		return nil
	}
	lock, args := q.itemForUpdate, []any{sku}
	if g.bucket > 0 {
		lock, args = q.bucketForUpdate, []any{sku, g.bucket}
	}
	if err := tx.QueryRowContext(ctx, lock, args...).Scan(&g.available); err != nil {
		return err
	}
	if g.limit == 0 {
		return nil
	}
	return g.lockUsers(ctx, tx, q, sku, open)
}

// lockUsers locks the batch's users' rows of the item and reads what they
// hold.
func (g *grant) lockUsers(ctx context.Context, tx *sql.Tx, q *queries, sku string, reqs []*pending) error {
	for _, p := range reqs {
		if _, ok := g.held[p.r.UserID]; !ok {
			g.held[p.r.UserID] = 0
			g.users = append(g.users, p.r.UserID)
		}
	}
	slices.Sort(g.users)
	args := []any{sku}
	for _, u := range g.users {
		args = append(args, u)
	}
	if !g.whole {
		// A user who holds nothing of the item yet has no row to lock,
		// and batches on different rows of its stock (buckets) share no
		// other lock: both would see 0 and grant the user's first
		// reservations past the limit. Insert the missing rows first, in
		// user order: a second insert of a row waits for the first's
		// transaction, and the SELECT … FOR UPDATE then reads what it
		// committed.
		pairs := make([]any, 0, 2*len(g.users))
		for _, u := range g.users {
			pairs = append(pairs, u, sku)
		}
		if _, err := tx.ExecContext(ctx, q.ensureUsers(len(g.users)), pairs...); err != nil {
			return err
		}
	}
	rows, err := tx.QueryContext(ctx, q.usersForUpdate(len(g.users)), args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		var u, n int64
		if err := rows.Scan(&u, &n); err != nil {
			_ = rows.Close() // the Scan error is the one to report
			return err
		}
		g.held[u] = n
	}
	return errors.Join(rows.Err(), rows.Close())
}

// decide grants reqs in order while stock and limits allow (a request
// with a verdict is rejected for it), and returns the requests it
// decided with their reservation rows: (request_id, user_id, sku, qty,
// state, reason, ttl in µs, bucket); and, when a bucket is locked, the
// requests it was short of, which the sum of the buckets may still serve.
func (g *grant) decide(reqs []*pending, ttl time.Duration) (decided []*pending, rows []any, short []*pending) {
	rows = make([]any, 0, 8*len(reqs))
	for _, p := range reqs {
		n := int64(p.r.Qty)
		state, reason, bucket := Reserved, "", 0
		switch {
		case p.verdict != "":
			state, reason = Rejected, p.verdict
		case g.limit > 0 && g.held[p.r.UserID]+n > int64(g.limit):
			state, reason = Rejected, reasonLimit
		case n > g.available && !g.whole:
			short = append(short, p)
			continue
		case n > g.available:
			state, reason = Rejected, reasonSoldOut
		default:
			g.available -= n
			g.taken += n
			g.held[p.r.UserID] += n
			g.added[p.r.UserID] += n
			bucket = g.bucket
		}
		decided = append(decided, p)
		rows = append(rows, p.r.RequestID, p.r.UserID, p.r.SKU, p.r.Qty, string(state), reason, ttl.Microseconds(), bucket)
	}
	return decided, rows, short
}

// apply takes the granted units from the item in one UPDATE and adds them
// to their users in one upsert.
func (g *grant) apply(ctx context.Context, tx *sql.Tx, q *queries, sku string) error {
	if g.taken == 0 {
		return nil
	}
	if err := g.take(ctx, tx, q, sku); err != nil {
		return err
	}
	if g.limit == 0 {
		return nil
	}
	var args []any
	for _, u := range g.users {
		if n := g.added[u]; n > 0 {
			args = append(args, u, sku, n)
		}
	}
	_, err := tx.ExecContext(ctx, q.addToUsers(len(args)/3), args...)
	return err
}

// take takes the granted units: from the item's row, the locked bucket,
// or the pool of all buckets, spreading what is left.
func (g *grant) take(ctx context.Context, tx *sql.Tx, q *queries, sku string) error {
	if g.pool != nil {
		return g.pool.write(ctx, tx, q, sku, g.available, g.taken)
	}
	take, args := q.takeStock, q.takeStockArgs(sku, g.taken)
	if g.bucket > 0 {
		take, args = q.bucketTake, q.bucketTakeArgs(g.taken, sku, g.bucket)
	}
	res, err := tx.ExecContext(ctx, take, args...)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return cmp.Or(err, fmt.Errorf("item %q changed under its row lock", sku))
	}
	return nil
}

// record inserts the batch's reservation rows in one INSERT and reads
// them back into got.
func (b *batcher) record(ctx context.Context, tx *sql.Tx, fresh []*pending, rows []any, got map[string]outcomeOf) error {
	s, q := b.s, b.s.q
	insert := q.insertReservations(len(fresh))
	if q.d == sqldialect.Postgres {
		return s.collect(ctx, tx, insert, rows, got)
	}
	if _, err := tx.ExecContext(ctx, insert, rows...); err != nil {
		return err
	}
	return s.collect(ctx, tx, q.byRequests(len(fresh)), requestIDs(fresh), got)
}

// collect runs query, which returns reservation rows, into got by request
// id.
func (s *Store) collect(ctx context.Context, q querier, query string, args []any, got map[string]outcomeOf) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	for rows.Next() {
		res, err := scanReservation(rows)
		if err != nil {
			_ = rows.Close() // the Scan error is the one to report
			return err
		}
		got[res.RequestID] = outcomeOf{res: res}
	}
	return errors.Join(rows.Err(), rows.Close())
}
