// Package inventory is an inventory deduction service on MySQL or
// PostgreSQL: buyers reserve units of an item, then confirm (paid: the
// units are sold) or cancel; reservations not confirmed within their TTL
// expire and return their stock, through a sweeper that runs on one node
// of the fleet at a time.
//
// Every request carries a request id: a retried request returns the first
// outcome (a reservation, or the rejection: sold out, over the user's
// limit), so clients may retry after any error. The invariant available +
// reserved + sold = initial holds in every row a reader can see (a CHECK
// constraint keeps it), stock is never negative, and a user never holds
// more units of an item than its per-user limit.
//
// Four strategies deduct stock:
//
//   - Atomic runs each Reserve as its own transaction around one
//     conditional UPDATE … SET available = available - n WHERE available >= n:
//     the single-row baseline. Every buyer queues on the item's row lock
//     in the database, one transaction at a time.
//   - Combining (the default) queues a process's concurrent Reserves for
//     one item in the process, and runs each batch as one transaction: the
//     row is locked once, one UPDATE takes the batch's units, one
//     multi-row INSERT records every outcome. It is the statement queue of
//     AliSQL's inventory hint and PolarDB's grouped hot-row update, done in
//     the application: the database sees one transaction per batch.
//   - Redis (WithRedis) puts a gate in front of combining: one Lua script
//     checks the item's count in Redis, takes the units and records the
//     grant in an outbox, so buyers of a sold-out item are turned away
//     without a transaction on the item's row, and the batches carry
//     grants the database then decides exactly. The database stays the
//     ledger: the gate may let a request through that the database
//     rejects, never sell what the database does not have. When Redis
//     loses the count (a restart without persistence, a failover) it is
//     rebuilt from the database; when Redis is down the database decides
//     alone; Reconcile (run by RunSweeper) repairs the count and writes
//     the grants of dead processes from the outbox to the database.
//   - Buckets makes AddItem split the item's stock over K rows
//     (WithBuckets). Each process's combining batches take from one row
//     drawn at random, so processes do not queue on one row lock. A row
//     short of a request is rebalanced: all K locked in order, the units
//     taken from the sum and the rest spread evenly, so no unit is
//     stranded.
//     Every Store reserves a bucketed item from its buckets.
//
// The package is apart from package seckill, whose strategies are the
// lesson (one unit, one order per buyer, oversell shown); inventory is the
// service: quantities, reservations, idempotency and expiry.
//
// Tables come from the migrations in inventory/migrations, applied by
// Migrate or the migrate CLI with x-migrations-table=inventory_schema_migrations.
package inventory

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"
	"unicode"

	"github.com/dlockhq/dlock"
	"github.com/dlockhq/dlock/internal/sqldialect"
	"github.com/dlockhq/dlock/internal/sqlmigrate"
)

var (
	// ErrSoldOut rejects a Reserve for more units than are available.
	ErrSoldOut = errors.New("inventory: sold out")
	// ErrOverLimit rejects a Reserve that would give the user more units of
	// the item than its per-user limit.
	ErrOverLimit = errors.New("inventory: over the per-user limit")
	// ErrUnknownSKU is returned for an item that was never added.
	ErrUnknownSKU = errors.New("inventory: unknown sku")
	// ErrItemExists is returned by AddItem for a sku already added.
	ErrItemExists = errors.New("inventory: the item exists")
	// ErrNotFound is returned for a reservation id that does not exist.
	ErrNotFound = errors.New("inventory: no such reservation")
	// ErrRequestReused rejects a Reserve whose request id was used before
	// for another user, item or quantity.
	ErrRequestReused = errors.New("inventory: request id already used for another request")
	// ErrExpired is returned by Confirm and Cancel for a reservation that
	// expired: its units went back to the stock.
	ErrExpired = errors.New("inventory: reservation expired")
	// ErrCancelled is returned by Confirm for a cancelled reservation.
	ErrCancelled = errors.New("inventory: reservation cancelled")
	// ErrConfirmed is returned by Cancel for a confirmed reservation.
	ErrConfirmed = errors.New("inventory: reservation already confirmed")
	// ErrRejected is returned by Confirm and Cancel for a request that
	// reserved nothing.
	ErrRejected = errors.New("inventory: request was rejected; nothing is reserved")
)

// Limits on input, checked before any I/O.
const (
	// MaxQty is the most units one request may reserve.
	MaxQty = 1000
	// MaxIDLen is the longest request id and sku, in bytes.
	MaxIDLen = 64
)

// State is where a reservation is in its life.
type State string

// The states of a reservation.
const (
	Reserved  State = "reserved"  // units held for the buyer
	Confirmed State = "confirmed" // paid: the units are sold
	Cancelled State = "cancelled" // the buyer gave the units back
	Expired   State = "expired"   // not confirmed in time; the units went back
	Rejected  State = "rejected"  // nothing reserved: sold out or over the limit
)

// Reservation is the outcome of one Reserve request.
type Reservation struct {
	ID        int64
	RequestID string
	UserID    int64
	SKU       string
	Qty       int
	State     State
	// Reason is why a request was rejected: ErrSoldOut or ErrOverLimit;
	// nil otherwise.
	Reason error
	// ExpiresAt is when a reservation not confirmed expires, by the
	// database server's clock.
	ExpiresAt time.Time

	bucket int // of a bucketed item, the bucket its units came from
}

// Item is an item's stock.
type Item struct {
	SKU                string
	Initial, Available int64
	Reserved, Sold     int64
	PerUserLimit       int // 0: none
	// Buckets is how many rows the item's stock is split over (the
	// buckets strategy); 0 for one row.
	Buckets int
}

// Strategy is how Reserve deducts stock.
type Strategy int

// The strategies; see the package documentation.
const (
	Combining Strategy = iota
	Atomic
	Redis
	Buckets
)

func (s Strategy) String() string {
	switch s {
	case Combining:
		return "combining"
	case Atomic:
		return "atomic"
	case Redis:
		return "redis"
	case Buckets:
		return "buckets"
	}
	return fmt.Sprintf("Strategy(%d)", int(s))
}

// Option configures a Store.
type Option func(*Store) error

// WithStrategy sets how Reserve deducts stock (Combining by default).
func WithStrategy(s Strategy) Option {
	return func(st *Store) error {
		if s < Combining || s > Buckets {
			return fmt.Errorf("inventory: unknown strategy %v", s)
		}
		st.strategy = s
		return nil
	}
}

// WithReservationTTL sets how long a reservation waits for Confirm before
// it expires (10 minutes by default).
func WithReservationTTL(d time.Duration) Option {
	return func(st *Store) error {
		if d < time.Millisecond {
			return fmt.Errorf("inventory: reservation TTL %v: less than a millisecond", d)
		}
		st.ttl = d
		return nil
	}
}

// MaxBuckets is the largest WithBuckets.
const MaxBuckets = 256

// WithBuckets sets how many rows the buckets strategy's AddItem splits an
// item's stock over (16 by default, at most MaxBuckets).
func WithBuckets(k int) Option {
	return func(st *Store) error {
		if k < 1 || k > MaxBuckets {
			return fmt.Errorf("inventory: buckets %d: not between 1 and %d", k, MaxBuckets)
		}
		st.buckets = k
		return nil
	}
}

// MaxBatch is the largest WithMaxBatch: a batch's INSERT binds 8
// parameters a request, and both servers bind at most 65,535.
const MaxBatch = 4096

// WithMaxBatch bounds how many Reserves the combining strategy runs in one
// transaction (256 by default, at most MaxBatch).
func WithMaxBatch(n int) Option {
	return func(st *Store) error {
		if n < 1 || n > MaxBatch {
			return fmt.Errorf("inventory: max batch %d: not between 1 and %d", n, MaxBatch)
		}
		st.maxBatch = n
		return nil
	}
}

// Store is the inventory in one database. It is safe for concurrent use;
// a process should share one Store, so its combining batches are large.
type Store struct {
	db       *sql.DB
	q        *queries
	strategy Strategy
	ttl      time.Duration
	maxBatch int
	buckets  int        // WithBuckets's
	gate     *redisGate // WithRedis's

	mu       sync.Mutex
	items    map[string]itemInfo // what does not change of each item seen
	batchers map[string]*batcher // the combining queue of each item
}

// itemInfo is what does not change of an item.
type itemInfo struct {
	limit   int // per user; 0: none
	buckets int // 0: not bucketed
}

// ErrGaleraPrepared is returned by New on a node of a MariaDB Galera
// cluster reached with go-sql-driver/mysql's server-side prepared
// statements (its default): a reservation's transaction that another
// node's commit aborts can go on without its error and commit part of
// its writes (measured: a unit reserved twice). Add interpolateParams=true
// to the DSN. It is pessimistic.ErrGaleraPrepared.
var ErrGaleraPrepared = sqldialect.ErrGaleraPrepared

// New returns the inventory in db, whose tables Migrate created.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("inventory: nil *sql.DB")
	}
	s := &Store{db: db, strategy: Combining, ttl: 10 * time.Minute, maxBatch: 256, buckets: 16,
		items: map[string]itemInfo{}, batchers: map[string]*batcher{}}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.strategy == Redis && s.gate == nil {
		return nil, errors.New("inventory: the redis strategy needs WithRedis")
	}
	ctx := context.Background()
	d, err := sqldialect.Of(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	if d == sqldialect.Postgres {
		if err := checkPooler(ctx, db); err != nil {
			return nil, fmt.Errorf("inventory: %w", err)
		}
	}
	if d == sqldialect.MySQL {
		if err := sqldialect.CheckGaleraTransactions(ctx, db); err != nil {
			return nil, fmt.Errorf("inventory: %w", err)
		}
	}
	s.q = &postgresQueries
	if d == sqldialect.MySQL {
		s.q = &mysqlQueries
	}
	return s, nil
}

// checkPooler refuses a PostgreSQL reached through a pooler the Store's
// statements or transactions do not survive: pgx's named statements
// (sqldialect.CheckPooledStatements), or a pooler that runs no
// transactions (PgBouncer's statement pooling), where every reservation
// would fail. It asks the server only behind a pooler pgx shows.
func checkPooler(ctx context.Context, db *sql.DB) error {
	if err := sqldialect.CheckPooledStatements(ctx, db); err != nil {
		return err
	}
	if pooled, _, _ := sqldialect.KnownPooler(db); !pooled {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err == nil {
		if _, err = tx.ExecContext(ctx, "SELECT 1"); err != nil {
			_ = tx.Rollback() // the statement's error says why
		} else {
			err = tx.Rollback()
		}
	}
	if err != nil {
		return fmt.Errorf("the pooler before PostgreSQL runs no transactions (PgBouncer's statement pooling?), and each reservation is one: use session or transaction pooling (%w)", err)
	}
	return nil
}

// Strategy returns the Store's strategy.
func (s *Store) Strategy() Strategy { return s.strategy }

//go:embed migrations/postgres/*.sql migrations/mysql/*.sql
var migrationsFS embed.FS

// MigrationsTable records which inventory migrations have run.
const MigrationsTable = "inventory_schema_migrations"

// Migrate applies the inventory's migrations to db.
func Migrate(ctx context.Context, db *sql.DB) error {
	sub, err := fs.Sub(migrationsFS, "migrations")
	if err != nil {
		return err
	}
	return sqlmigrate.Up(ctx, db, sub, MigrationsTable)
}

// AddItem adds an item with initial units, each user limited to
// perUserLimit of them (0: no limit). The buckets strategy splits the
// units over WithBuckets rows; every Store reserves a bucketed item from
// its buckets. A sku added before fails with ErrItemExists.
func (s *Store) AddItem(ctx context.Context, sku string, initial int64, perUserLimit int) error {
	if err := checkID("sku", sku); err != nil {
		return err
	}
	if initial < 0 || perUserLimit < 0 {
		return fmt.Errorf("inventory: AddItem %q: initial %d and per-user limit %d must not be negative", sku, initial, perUserLimit)
	}
	var err error
	if s.strategy == Buckets {
		err = s.addBucketed(ctx, sku, initial, perUserLimit)
	} else {
		args := []any{sku, initial, perUserLimit}
		if s.q.d == sqldialect.MySQL {
			args = []any{sku, initial, initial, perUserLimit}
		}
		_, err = s.db.ExecContext(ctx, s.q.insertItem, args...)
	}
	switch {
	case sqldialect.Duplicate(err):
		return fmt.Errorf("%w: %q", ErrItemExists, sku)
	case err != nil:
		return fmt.Errorf("inventory: AddItem %q: %w", sku, err)
	}
	return nil
}

// Item returns an item's stock, read in one statement: the four counts
// are of one instant (of a bucketed item, the sums of its buckets').
func (s *Store) Item(ctx context.Context, sku string) (Item, error) {
	if err := checkID("sku", sku); err != nil {
		return Item{}, err
	}
	it := Item{SKU: sku}
	err := s.db.QueryRowContext(ctx, s.q.item, sku).Scan(&it.Initial, &it.Available, &it.Reserved, &it.Sold, &it.PerUserLimit, &it.Buckets)
	if errors.Is(err, sql.ErrNoRows) {
		return Item{}, fmt.Errorf("%w %q", ErrUnknownSKU, sku)
	}
	if err != nil {
		return Item{}, fmt.Errorf("inventory: item %q: %w", sku, err)
	}
	return it, nil
}

// Request is one Reserve request.
type Request struct {
	// RequestID makes the request idempotent: a request with an id seen
	// before returns the first outcome. Up to MaxIDLen printable bytes.
	RequestID string
	UserID    int64
	SKU       string
	Qty       int
}

// Validate returns the error Reserve would return for r before any I/O.
func (r Request) Validate() error {
	if err := checkID("request id", r.RequestID); err != nil {
		return err
	}
	if err := checkID("sku", r.SKU); err != nil {
		return err
	}
	if r.UserID <= 0 {
		return fmt.Errorf("inventory: user id %d: not positive", r.UserID)
	}
	if r.Qty < 1 || r.Qty > MaxQty {
		return fmt.Errorf("inventory: qty %d: not between 1 and %d", r.Qty, MaxQty)
	}
	return nil
}

func checkID(what, id string) error {
	if id == "" {
		return fmt.Errorf("inventory: empty %s", what)
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("inventory: %s of %d bytes: longer than %d", what, len(id), MaxIDLen)
	}
	for _, r := range id {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("inventory: %s %q: only printable characters, no spaces", what, id)
		}
	}
	return nil
}

// Reserve holds qty units of sku for userID until Confirm, Cancel or the
// reservation's TTL. requestID makes the request idempotent: a request
// with an id seen before returns the first outcome. A rejection is an
// outcome too: the reservation returned has State Rejected and the error
// is ErrSoldOut or ErrOverLimit, and a retry of the request gets the same.
// On any other error the outcome is unknown: retry with the same request
// id to learn it. Bad arguments (see Request.Validate) fail before any I/O.
func (s *Store) Reserve(ctx context.Context, requestID string, userID int64, sku string, qty int) (Reservation, error) {
	return s.ReserveRequest(ctx, Request{RequestID: requestID, UserID: userID, SKU: sku, Qty: qty})
}

// ReserveRequest is Reserve with its arguments in a Request.
func (s *Store) ReserveRequest(ctx context.Context, r Request) (Reservation, error) {
	if err := r.Validate(); err != nil {
		return Reservation{}, err
	}
	info, err := s.info(ctx, r.SKU)
	if err != nil {
		return Reservation{}, err
	}
	switch {
	case s.strategy == Atomic:
		res, err := s.reserveAlone(ctx, r, info)
		return res, outcome(res, err)
	case s.strategy == Redis && info.buckets == 0:
		o := s.reserveGated(ctx, r)
		return o.res, outcome(o.res, o.err)
	default: // the batch looks up its requests' ids at once
		o := s.batcher(r.SKU).reserve(ctx, r, "")
		return o.res, outcome(o.res, o.err)
	}
}

// reserveAlone decides r in transactions of its own: the atomic
// strategy, and the requests a combining batch could not decide. A
// transaction a deadlock or a Galera certification conflict rolled back
// is tried again (retryConflicts).
func (s *Store) reserveAlone(ctx context.Context, r Request, info itemInfo) (Reservation, error) {
	return retryConflicts(ctx, func() (Reservation, error) { return s.reserveAloneOnce(ctx, r, info) })
}

func (s *Store) reserveAloneOnce(ctx context.Context, r Request, info itemInfo) (Reservation, error) {
	if info.buckets > 0 {
		return s.reserveBucketed(ctx, r, info)
	}
	if res, found, err := s.byRequest(ctx, s.db, r); found || err != nil {
		return res, err
	}
	return s.reserveOne(ctx, r, info.limit)
}

// outcome is the error Reserve returns for res.
func outcome(res Reservation, err error) error {
	if err != nil {
		return err
	}
	return res.Reason
}

// info returns what does not change of an item, known once read.
func (s *Store) info(ctx context.Context, sku string) (itemInfo, error) {
	s.mu.Lock()
	info, ok := s.items[sku]
	s.mu.Unlock()
	if ok {
		return info, nil
	}
	it, err := s.Item(ctx, sku)
	if err != nil {
		return itemInfo{}, err
	}
	info = itemInfo{limit: it.PerUserLimit, buckets: it.Buckets}
	s.mu.Lock()
	s.items[sku] = info
	s.mu.Unlock()
	return info, nil
}

// limit returns the item's per-user limit.
func (s *Store) limit(ctx context.Context, sku string) (int, error) {
	info, err := s.info(ctx, sku)
	return info.limit, err
}

// querier is *sql.DB or *sql.Tx.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// byRequest finds r's first outcome, if r was seen.
func (s *Store) byRequest(ctx context.Context, q querier, r Request) (Reservation, bool, error) {
	res, err := scanReservation(q.QueryRowContext(ctx, s.q.byRequest, r.RequestID))
	if errors.Is(err, sql.ErrNoRows) {
		return Reservation{}, false, nil
	}
	if err != nil {
		return Reservation{}, false, fmt.Errorf("inventory: reserve: %w", err)
	}
	if res.UserID != r.UserID || res.SKU != r.SKU || res.Qty != r.Qty {
		return Reservation{}, true, fmt.Errorf("%w: %q reserved %d of %q for user %d", ErrRequestReused, r.RequestID, res.Qty, res.SKU, res.UserID)
	}
	return res, true, nil
}

type scanner interface{ Scan(dest ...any) error }

func scanReservation(row scanner, extra ...any) (Reservation, error) {
	var res Reservation
	var state, reason string
	var expiresUs int64
	err := row.Scan(append([]any{&res.ID, &res.RequestID, &res.UserID, &res.SKU, &res.Qty, &state, &reason, &expiresUs, &res.bucket}, extra...)...)
	res.State = State(state)
	res.Reason = reasonErr(reason)
	res.ExpiresAt = time.UnixMicro(expiresUs)
	return res, err
}

// Reasons of rejections, as the reason column keeps them.
const (
	reasonSoldOut = "sold_out"
	reasonLimit   = "limit"
)

func reasonErr(reason string) error {
	switch reason {
	case reasonSoldOut:
		return ErrSoldOut
	case reasonLimit:
		return ErrOverLimit
	}
	return nil
}

// reserveOne is the atomic strategy: one transaction for r. Rows are
// locked in the order every path takes: the item's, then the user's.
func (s *Store) reserveOne(ctx context.Context, r Request, limit int) (Reservation, error) {
	reason, err := s.tryReserve(ctx, r, limit, s.takeFromItem)
	return s.decided(ctx, r, reason, err)
}

// decided records r's rejection for reason, if it has one, and returns
// r's outcome after an attempt that ended in err.
func (s *Store) decided(ctx context.Context, r Request, reason string, err error) (Reservation, error) {
	if err != nil || reason == "" {
		return s.settle(ctx, r, err)
	}
	_, err = s.insertReservation(ctx, s.db, r, Rejected, reason, 0)
	return s.settle(ctx, r, err)
}

// taker takes r's units in tx, and returns the bucket they came from (0:
// the item's row), or false when the stock does not have them.
type taker func(ctx context.Context, tx *sql.Tx, r Request) (bucket int, ok bool, err error)

// takeFromItem takes r's units from the item's row.
func (s *Store) takeFromItem(ctx context.Context, tx *sql.Tx, r Request) (int, bool, error) {
	res, err := tx.ExecContext(ctx, s.q.takeStock, s.q.takeStockArgs(r.SKU, int64(r.Qty))...)
	if err != nil {
		return 0, false, err
	}
	n, err := res.RowsAffected()
	return 0, n == 1, err
}

// tryReserve takes r's units with take in a transaction that records the
// reservation, or returns why it could not: sold out or over the limit.
func (s *Store) tryReserve(ctx context.Context, r Request, limit int, take taker) (reason string, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil || reason != "" {
			_ = tx.Rollback()
		}
	}()
	bucket, ok, err := take(ctx, tx, r)
	if err != nil || !ok {
		return reasonSoldOut, err
	}
	if limit > 0 {
		held, err := s.addToUser(ctx, tx, r)
		if err != nil {
			return "", err
		}
		if held > int64(limit) {
			return reasonLimit, nil
		}
	}
	if _, err := s.insertReservation(ctx, tx, r, Reserved, "", bucket); err != nil {
		return "", err
	}
	return "", tx.Commit()
}

// addToUser adds r's units to the user's and returns what the user holds.
func (s *Store) addToUser(ctx context.Context, tx *sql.Tx, r Request) (int64, error) {
	var held int64
	if s.q.d == sqldialect.Postgres {
		err := tx.QueryRowContext(ctx, s.q.addToUser, r.UserID, r.SKU, r.Qty).Scan(&held)
		return held, err
	}
	if _, err := tx.ExecContext(ctx, s.q.addToUser, r.UserID, r.SKU, r.Qty); err != nil {
		return 0, err
	}
	err := tx.QueryRowContext(ctx, s.q.userQty, r.UserID, r.SKU).Scan(&held)
	if errors.Is(err, sql.ErrNoRows) {
		// The row this transaction just wrote is gone: a Galera node
		// rolled the transaction back for another node's conflicting
		// commit (a brute-force abort) and its error did not arrive, as
		// under prepared statements (which New refuses).
		return 0, errRolledBack
	}
	return held, err
}

// errRolledBack is an attempt's transaction found rolled back under it,
// as after a deadlock: retryConflicts tries again.
var errRolledBack = errors.New("the transaction was rolled back by a conflicting commit on another node")

// insertReservation records r's outcome, its units from bucket.
func (s *Store) insertReservation(ctx context.Context, q querier, r Request, state State, reason string, bucket int) (Reservation, error) {
	args := []any{r.RequestID, r.UserID, r.SKU, r.Qty, string(state), reason, s.ttl.Microseconds(), bucket}
	if s.q.d == sqldialect.Postgres {
		return scanReservation(q.QueryRowContext(ctx, s.q.insertReservation, args...))
	}
	res, err := q.ExecContext(ctx, s.q.insertReservation, args...)
	if err != nil {
		return Reservation{}, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return Reservation{}, err
	}
	return scanReservation(q.QueryRowContext(ctx, s.q.byID, id))
}

// settle returns r's recorded outcome after an attempt that ended in err
// (nil when it committed): a request whose id another attempt recorded
// first (a retry racing the original) gets that outcome.
func (s *Store) settle(ctx context.Context, r Request, err error) (Reservation, error) {
	if err != nil && !sqldialect.Duplicate(err) {
		return Reservation{}, fmt.Errorf("inventory: reserve %q: %w", r.RequestID, err)
	}
	res, found, ferr := s.byRequest(ctx, s.db, r)
	switch {
	case ferr != nil:
		return Reservation{}, ferr
	case !found:
		return Reservation{}, fmt.Errorf("inventory: reserve %q: its outcome is not recorded", r.RequestID)
	}
	return res, nil
}

// Reservation returns a reservation by id.
func (s *Store) Reservation(ctx context.Context, id int64) (Reservation, error) {
	res, err := scanReservation(s.db.QueryRowContext(ctx, s.q.byID, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Reservation{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: reservation %d: %w", id, err)
	}
	return res, nil
}

// Confirm sells a reservation's units: the buyer paid. Confirming a
// confirmed reservation returns it again. A reservation past its expiry
// expires here, if the sweeper has not expired it yet, and Confirm
// returns ErrExpired.
func (s *Store) Confirm(ctx context.Context, id int64) (Reservation, error) {
	return s.settleReservation(ctx, id, Confirmed)
}

// Cancel returns a reservation's units to the stock. Cancelling a
// cancelled reservation returns it again.
func (s *Store) Cancel(ctx context.Context, id int64) (Reservation, error) {
	return s.settleReservation(ctx, id, Cancelled)
}

// settleReservation moves reservation id from Reserved to to, in a
// transaction that locks the reservation, then the item, then the user
// (tried again after a deadlock or certification conflict).
func (s *Store) settleReservation(ctx context.Context, id int64, to State) (Reservation, error) {
	if id <= 0 {
		return Reservation{}, fmt.Errorf("inventory: reservation id %d: not positive", id)
	}
	return retryConflicts(ctx, func() (Reservation, error) { return s.settleReservationOnce(ctx, id, to) })
}

func (s *Store) settleReservationOnce(ctx context.Context, id int64, to State) (res Reservation, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: %s %d: %w", verb(to), id, err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var overdue bool
	res, err = scanReservation(tx.QueryRowContext(ctx, s.q.byIDForUpdate, id), &overdue)
	if errors.Is(err, sql.ErrNoRows) {
		return Reservation{}, fmt.Errorf("%w: %d", ErrNotFound, id)
	}
	if err != nil {
		return Reservation{}, fmt.Errorf("inventory: %s %d: %w", verb(to), id, err)
	}
	if res.State != Reserved {
		_ = tx.Rollback()
		return res, stateErr(res.State, to)
	}
	if overdue && to == Confirmed {
		to = Expired
	}
	if err := s.move(ctx, tx, res, to); err != nil {
		return Reservation{}, fmt.Errorf("inventory: %s %d: %w", verb(to), id, err)
	}
	if err := tx.Commit(); err != nil {
		return Reservation{}, fmt.Errorf("inventory: %s %d: %w", verb(to), id, err)
	}
	if to != Confirmed {
		s.giveBack(ctx, res.SKU, res.Qty)
	}
	res.State = to
	return res, stateErr(to, to)
}

// move moves res, locked by tx and Reserved, to state to, and its units
// with it.
func (s *Store) move(ctx context.Context, tx *sql.Tx, res Reservation, to State) error {
	if _, err := tx.ExecContext(ctx, s.q.setState, string(to), res.ID); err != nil {
		return err
	}
	confirm, back, args := s.q.confirmStock, s.q.returnStock, s.q.twice(res.SKU, int64(res.Qty))
	if res.bucket > 0 {
		confirm, back, args = s.q.bucketConfirm, s.q.bucketReturn, s.q.bucketArgs(int64(res.Qty), res.SKU, res.bucket)
	}
	if to == Confirmed {
		_, err := tx.ExecContext(ctx, confirm, args...)
		return err
	}
	if _, err := tx.ExecContext(ctx, back, args...); err != nil {
		return err
	}
	limit, err := s.limit(ctx, res.SKU)
	if err != nil || limit == 0 {
		return err
	}
	_, err = tx.ExecContext(ctx, s.q.takeFromUser, res.Qty, res.UserID, res.SKU)
	return err
}

func verb(to State) string {
	switch to {
	case Confirmed:
		return "confirm"
	case Cancelled:
		return "cancel"
	}
	return "expire"
}

// stateErr is the error of asking a reservation in state at to move to
// to: nil when it is there already (a retried Confirm or Cancel).
func stateErr(at, to State) error {
	switch {
	case at == to && to != Expired:
		return nil
	case at == Expired:
		return ErrExpired
	case at == Cancelled:
		return ErrCancelled
	case at == Confirmed:
		return ErrConfirmed
	case at == Rejected:
		return ErrRejected
	}
	return nil
}

// Sweep expires up to n reservations past their expiry, by the server's
// clock, returning their units to the stock, and returns how many it
// expired.
func (s *Store) Sweep(ctx context.Context, n int) (int, error) {
	if n < 1 {
		return 0, fmt.Errorf("inventory: sweep %d: not positive", n)
	}
	rows, err := s.db.QueryContext(ctx, s.q.overdue, n)
	if err != nil {
		return 0, fmt.Errorf("inventory: sweep: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close() // the Scan error is the one to report
			return 0, fmt.Errorf("inventory: sweep: %w", err)
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, fmt.Errorf("inventory: sweep: %w", err)
	}
	expired := 0
	for _, id := range ids {
		res, err := s.expire(ctx, id)
		if err != nil {
			return expired, err
		}
		if res {
			expired++
		}
	}
	return expired, nil
}

// expire expires reservation id if it is still Reserved and overdue.
func (s *Store) expire(ctx context.Context, id int64) (expired bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("inventory: expire %d: %w", id, err)
	}
	defer func() {
		if err != nil || !expired {
			_ = tx.Rollback()
		}
	}()
	var overdue bool
	res, err := scanReservation(tx.QueryRowContext(ctx, s.q.byIDForUpdate, id), &overdue)
	if err != nil {
		return false, fmt.Errorf("inventory: expire %d: %w", id, err)
	}
	if res.State != Reserved || !overdue {
		return false, nil
	}
	if err := s.move(ctx, tx, res, Expired); err != nil {
		return false, fmt.Errorf("inventory: expire %d: %w", id, err)
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("inventory: expire %d: %w", id, err)
	}
	s.giveBack(ctx, res.SKU, res.Qty)
	return true, nil
}

// conflictAttempts bounds retryConflicts, and conflictBackoff is its
// pause between attempts.
const conflictAttempts = 40

var conflictBackoff = dlock.ExponentialBackoff(time.Millisecond, 32*time.Millisecond)

// retryConflicts runs f, a transaction, until it returns anything but a
// deadlock (MySQL's error 1213, which is also how a Galera node reports a
// certification conflict with another node's commit; PostgreSQL's
// 40P01), at most conflictAttempts times, pausing a jittered, growing
// while between attempts. Such an error rolled f's transaction back whole,
// so an attempt again is safe.
func retryConflicts[T any](ctx context.Context, f func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		v, err := f()
		if !sqldialect.Deadlock(err) && !errors.Is(err, errRolledBack) || attempt == conflictAttempts {
			return v, err
		}
		t := time.NewTimer(conflictBackoff(attempt - 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
	}
}
