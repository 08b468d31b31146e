package inventory

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The redis strategy keeps, for each item, a gate in Redis: a count of
// the units a Reserve may still take, and an outbox of the grants the
// gate made that the database has not settled yet. The database stays
// the ledger and decides every grant exactly; the gate turns buyers away
// once the item is sold out and no grant is pending, without a
// transaction on the item's row, and its errors are all on the side of
// letting a request through to the database, never of selling what the
// database does not have:
//
//   - while the count is short of a request and grants are pending (some
//     may come back: the database rejects a grant over the user's
//     limit), the database decides the request, and what it grants comes
//     off the count;
//   - the count is lower than the database's available units otherwise
//     only between a grant returned (Cancel, expiry) and the gate told;
//     Reconcile, which the sweeper runs every interval, rebuilds it;
//   - after Redis lost the item's keys (a restart without persistence, a
//     failover to a replica that missed writes), the first Reserve finds
//     the count missing and rebuilds it from the database;
//   - a grant the gate made whose process died before the database
//     settled it stays in the outbox; once it is older than outboxAge,
//     Reconcile writes it to the database, which grants it if the stock
//     allows (the buyer's retry finds it; unconfirmed, it expires).
//
// Keys share the item's hash tag, so an item's scripts run on one node
// of a Redis Cluster.

// outboxAge is when a grant in the outbox counts as abandoned by its
// process: the longest a combining transaction may run.
const outboxAge = batchTimeout

// redisGate is a Store's link to Redis.
type redisGate struct {
	c      redis.UniversalClient
	prefix string
	token  string        // this process's, in its outbox entries
	seq    atomic.Uint64 // numbers this process's outbox entries
	// abandoned is the age of an abandoned grant (outboxAge; tests
	// shorten it).
	abandoned time.Duration
	// rebuilding is held by the one rebuild of a lost count at a time (a
	// channel, so a caller waiting for it leaves with its ctx).
	rebuilding chan struct{}
	// repairing holds a *sync.Mutex per item: one repair of a count
	// found high at a time, the others skip it.
	repairing sync.Map
}

// WithRedis gives the redis strategy its server (required by it, unused
// by the others), with its keys under prefix ("inventory:" when empty):
// inventories in different databases sharing one Redis need different
// prefixes.
func WithRedis(c redis.UniversalClient, prefix string) Option {
	return func(st *Store) error {
		if c == nil {
			return errors.New("inventory: WithRedis: nil client")
		}
		if strings.ContainsAny(prefix, "{}") {
			return fmt.Errorf("inventory: WithRedis: prefix %q: braces would change the keys' hash tag", prefix)
		}
		b := make([]byte, 8)
		_, _ = rand.Read(b) // never fails (crypto/rand)
		st.gate = &redisGate{c: c, prefix: cmp.Or(prefix, "inventory:"), token: hex.EncodeToString(b),
			abandoned: outboxAge, rebuilding: make(chan struct{}, 1)}
		return nil
	}
}

func (g *redisGate) keys(sku string) []string {
	tag := g.prefix + "{" + sku + "}"
	return []string{tag + ":stock", tag + ":outbox"}
}

// The gate's verdicts on a request.
const (
	gateMissing  = -1 // the item's count is not in Redis: rebuild it
	gateSoldOut  = 0
	gateGranted  = 1
	gateInFlight = 2 // an earlier attempt of the request holds a grant
	// gateShort: the count is short of the request, but grants are
	// pending; some may come back (a database rejection), so the database
	// decides rather than the gate turning a buyer away for units a
	// pending grant holds.
	gateShort = 3
)

// takeScript: KEYS stock, outbox; ARGV request id, qty, entry (without
// its time, which the script prefixes from the server's clock).
var takeScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return 2 end
local s = redis.call('GET', KEYS[1])
if not s then return -1 end
local n = tonumber(ARGV[2])
if tonumber(s) < n then
  if redis.call('HLEN', KEYS[2]) > 0 then return 3 end
  return 0
end
redis.call('DECRBY', KEYS[1], n)
local t = redis.call('TIME')
redis.call('HSET', KEYS[2], ARGV[1], t[1] .. string.format('%06d', tonumber(t[2])) .. ':' .. ARGV[3])
return 1
`)

// settleScript: KEYS stock, outbox; ARGV request id, the end of its entry
// (the attempt's), units to give back. It acts only on the attempt's
// entry (another settlement may have come first).
var settleScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v or string.sub(v, -string.len(ARGV[2])) ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
local n = tonumber(ARGV[3])
if n > 0 and redis.call('EXISTS', KEYS[1]) == 1 then redis.call('INCRBY', KEYS[1], n) end
return 1
`)

// giveBackScript: KEYS stock; ARGV units the database got back.
var giveBackScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('INCRBY', KEYS[1], ARGV[1]) end
return 0
`)

// rebuildScript: KEYS stock, outbox; ARGV the database's available units,
// then (request id, entry, qty) of each grant the database had not
// recorded or had rejected: the count is the units less those of such
// grants still in the outbox. It may be negative: grants pending beyond the stock, which
// the database will reject, giving their units back.
var rebuildScript = redis.NewScript(`
local s = tonumber(ARGV[1])
for i = 2, #ARGV, 3 do
  if redis.call('HGET', KEYS[2], ARGV[i]) == ARGV[i+1] then s = s - tonumber(ARGV[i+2]) end
end
redis.call('SET', KEYS[1], s)
return s
`)

// attempt names one attempt of r in the outbox: "<user>:<qty>:<process>.<n>".
func (g *redisGate) attempt(r Request) string {
	return fmt.Sprintf("%d:%d:%s.%d", r.UserID, r.Qty, g.token, g.seq.Add(1))
}

// take asks the gate for r's units, and returns its verdict.
func (g *redisGate) take(ctx context.Context, r Request, attempt string) (int, error) {
	ctx, cancel := g.bounded(ctx)
	defer cancel()
	v, err := takeScript.Run(ctx, g.c, g.keys(r.SKU), r.RequestID, r.Qty, attempt).Int()
	g.failed(err)
	return v, err
}

// gateTimeout bounds each call a request makes to the gate: the gate
// only spares the database the requests it turns away, and a request
// whose call fails goes to the database, which decides alone. (go-redis's
// Cluster client retried a killed master for 9–14 s per call, long after
// its replica took over, until it reloaded its slot map.)
const gateTimeout = time.Second

// bounded is ctx bounded by gateTimeout.
func (g *redisGate) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, gateTimeout)
}

// failed notes a call that failed with err: on a Cluster the node may
// have been failed over, and the client reloads its slot map (in the
// background), so the next calls find the new master.
func (g *redisGate) failed(err error) {
	if c, ok := g.c.(*redis.ClusterClient); ok && err != nil && !errors.Is(err, redis.Nil) {
		c.ReloadState(context.Background())
	}
}

// entry is one grant in the outbox: "<µs by Redis's clock>:<user>:<qty>:<attempt>".
type entry struct {
	requestID, raw string
	at             time.Time
	userID         int64
	qty            int
}

func parseEntry(requestID, raw string) (entry, error) {
	f := strings.Split(raw, ":")
	if len(f) != 4 {
		return entry{}, fmt.Errorf("inventory: outbox entry %q of %q: malformed", raw, requestID)
	}
	us, err1 := strconv.ParseInt(f[0], 10, 64)
	user, err2 := strconv.ParseInt(f[1], 10, 64)
	qty, err3 := strconv.Atoi(f[2])
	if err := errors.Join(err1, err2, err3); err != nil {
		return entry{}, fmt.Errorf("inventory: outbox entry %q of %q: %w", raw, requestID, err)
	}
	return entry{requestID: requestID, raw: raw, at: time.UnixMicro(us), userID: user, qty: qty}, nil
}

// reserveGated is the redis strategy's Reserve: the gate, then the
// combining queue, which decides against the database's stock.
func (s *Store) reserveGated(ctx context.Context, r Request) outcomeOf {
	attempt := s.gate.attempt(r)
	verdict, err := s.gate.take(ctx, r, attempt)
	if err == nil && verdict == gateMissing {
		if err = s.rebuildLost(ctx, r.SKU); err == nil {
			verdict, err = s.gate.take(ctx, r, attempt)
		}
	}
	b := s.batcher(r.SKU)
	switch {
	case err != nil || verdict == gateMissing:
		// Without the gate the database decides alone, exactly.
		return b.reserve(ctx, r, "")
	case verdict == gateInFlight || verdict == gateShort:
		// The database decides; units it grants come off the count too.
		o := b.reserve(ctx, r, "")
		if o.err == nil && o.fresh && o.res.State == Reserved {
			s.giveBack(ctx, r.SKU, -r.Qty)
		}
		return o
	case verdict == gateSoldOut:
		return b.reserve(ctx, r, reasonSoldOut)
	}
	o := b.reserve(ctx, r, "")
	if o.err != nil {
		return o // the grant stays in the outbox until Reconcile settles it
	}
	s.settleGrant(ctx, r.SKU, r.RequestID, ":"+attempt, o)
	return o
}

// settleGrant removes a grant (the entry ending in attempt) from the outbox
// once the database decided its request (o), and gives its units back to the count unless the database
// took them for it. A rejection for sold out means the count was above
// the database's stock: the count is rebuilt.
func (s *Store) settleGrant(ctx context.Context, sku, requestID, attempt string, o outcomeOf) {
	back := 0
	if !o.fresh || o.res.State == Rejected {
		back = o.res.Qty
	}
	// An error (ctx ended, Redis gone) leaves the entry for Reconcile.
	gctx, cancel := s.gate.bounded(ctx)
	defer cancel()
	s.gate.failed(settleScript.Run(gctx, s.gate.c, s.gate.keys(sku), requestID, attempt, back).Err())
	if o.fresh && errors.Is(o.res.Reason, ErrSoldOut) {
		s.repair(ctx, sku)
	}
}

// repair reconciles sku's count, found above the database's stock,
// unless a repair of it is running already: a batch of rejections makes
// one. An error is dropped: the sweeper's next Reconcile retries.
func (s *Store) repair(ctx context.Context, sku string) {
	m, _ := s.gate.repairing.LoadOrStore(sku, new(sync.Mutex))
	mu := m.(*sync.Mutex)
	if !mu.TryLock() {
		return
	}
	defer mu.Unlock()
	_ = s.Reconcile(ctx, sku)
}

// giveBack tells the gate that qty units of sku went back to the stock
// (Cancel, expiry), or, negative, that the database granted them without
// the gate. An error is dropped: the next Reconcile repairs the count.
func (s *Store) giveBack(ctx context.Context, sku string, qty int) {
	if s.strategy != Redis {
		return
	}
	ctx, cancel := s.gate.bounded(ctx)
	defer cancel()
	s.gate.failed(giveBackScript.Run(ctx, s.gate.c, s.gate.keys(sku)[:1], qty).Err())
}

// rebuildLost rebuilds sku's count if it is missing, once in the process
// at a time.
func (s *Store) rebuildLost(ctx context.Context, sku string) error {
	select {
	case s.gate.rebuilding <- struct{}{}:
		defer func() { <-s.gate.rebuilding }()
	case <-ctx.Done():
		return ctx.Err()
	}
	gctx, cancel := s.gate.bounded(ctx)
	n, err := s.gate.c.Exists(gctx, s.gate.keys(sku)[0]).Result()
	cancel()
	s.gate.failed(err)
	if err != nil || n == 1 {
		return err
	}
	return s.Reconcile(ctx, sku)
}

// Reconcile rebuilds the redis strategy's count of sku from the
// database: the available units, less those of the gate's grants the
// database has not recorded yet or rejected (their settlement gives the
// units back). Grants older than outboxAge, whose
// process gave up on them or died, are written to the database first.
// What changes meanwhile can only leave the count above the database's
// stock (a request the database then rejects), never below it.
// RunSweeper calls it every interval for every item whose count Redis
// holds; a Store without WithRedis returns an error.
func (s *Store) Reconcile(ctx context.Context, sku string) error {
	if err := checkID("sku", sku); err != nil {
		return err
	}
	if s.gate == nil {
		return errors.New("inventory: Reconcile: the Store has no Redis (WithRedis)")
	}
	g := s.gate
	keys := g.keys(sku)
	entries, err := s.outbox(ctx, sku)
	if err != nil {
		return err
	}
	it, err := s.Item(ctx, sku) // read before the grants' records: one recorded in between leaves the count high, never low
	if err != nil {
		return err
	}
	recorded, err := s.recorded(ctx, entries)
	if err != nil {
		return fmt.Errorf("inventory: reconcile %q: %w", sku, err)
	}
	args := []any{it.Available}
	for _, e := range entries {
		// A grant the database has not recorded will take its units; one
		// it rejected will give them back when settled: either way they
		// are not the count's while the grant is in the outbox.
		if o, ok := recorded[e.requestID]; !ok || o.res.State == Rejected {
			args = append(args, e.requestID, e.raw, e.qty)
		}
	}
	if err := rebuildScript.Run(ctx, g.c, keys, args...).Err(); err != nil {
		return fmt.Errorf("inventory: reconcile %q: %w", sku, err)
	}
	if err := g.c.SAdd(ctx, g.itemsKey(), sku).Err(); err != nil {
		return fmt.Errorf("inventory: reconcile %q: %w", sku, err)
	}
	return nil
}

// itemsKey is the set of the items whose count Redis holds, which
// RunSweeper reconciles (a set apart from the items' keys: it has no hash
// tag of theirs).
func (g *redisGate) itemsKey() string { return g.prefix + "items" }

// outbox returns sku's grants in the outbox, after writing those older
// than the age of an abandoned grant to the database.
func (s *Store) outbox(ctx context.Context, sku string) ([]entry, error) {
	g := s.gate
	out, err := g.c.HGetAll(ctx, g.keys(sku)[1]).Result()
	if err != nil {
		return nil, fmt.Errorf("inventory: reconcile %q: %w", sku, err)
	}
	now, err := g.c.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("inventory: reconcile %q: %w", sku, err)
	}
	var entries []entry
	for id, raw := range out {
		e, err := parseEntry(id, raw)
		if err != nil {
			return nil, err
		}
		if now.Sub(e.at) <= g.abandoned {
			entries = append(entries, e)
		} else if err := s.writeAbandoned(ctx, sku, e); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// recorded returns the outcomes the database holds of entries' requests.
func (s *Store) recorded(ctx context.Context, entries []entry) (map[string]outcomeOf, error) {
	got := map[string]outcomeOf{}
	for i := 0; i < len(entries); i += MaxBatch {
		chunk := entries[i:min(i+MaxBatch, len(entries))]
		ids := make([]any, len(chunk))
		for j, e := range chunk {
			ids[j] = e.requestID
		}
		if err := s.collect(ctx, s.db, s.q.byRequests(len(ids)), ids, got); err != nil {
			return nil, err
		}
	}
	return got, nil
}

// writeAbandoned writes an abandoned grant of the outbox to the database
// (which decides it) and settles it.
func (s *Store) writeAbandoned(ctx context.Context, sku string, e entry) error {
	if _, err := s.info(ctx, sku); err != nil { // the batch reads it
		return err
	}
	r := Request{RequestID: e.requestID, UserID: e.userID, SKU: sku, Qty: e.qty}
	o := s.batcher(sku).reserve(ctx, r, "")
	if o.err != nil && !errors.Is(o.err, ErrRequestReused) {
		return fmt.Errorf("inventory: reconcile %q: %w", sku, o.err)
	}
	if o.err != nil { // the request id holds another request: the grant was never the database's
		o = outcomeOf{res: Reservation{Qty: e.qty}}
	}
	s.settleGrant(ctx, sku, e.requestID, e.raw, o)
	return nil
}

// Gate returns the redis strategy's count of sku: the units a Reserve may
// still take by Redis (negative while grants pending beyond the stock
// wait for the database to reject them), and false when Redis holds no
// count (lost, or never built).
func (s *Store) Gate(ctx context.Context, sku string) (int64, bool, error) {
	if s.gate == nil {
		return 0, false, errors.New("inventory: Gate: the Store has no Redis (WithRedis)")
	}
	n, err := s.gate.c.Get(ctx, s.gate.keys(sku)[0]).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("inventory: gate of %q: %w", sku, err)
	}
	return n, true, nil
}
