package inventory

import (
	"strings"

	"github.com/dlockhq/dlock/internal/sqldialect"
)

// queries is the inventory's SQL in one dialect, written out for each so a
// DBA reads what runs. The lists of the combining strategy's batches (IN
// lists, multi-row VALUES) are the only text built at run time, from
// placeholders alone.
type queries struct {
	d sqldialect.Dialect
	// nowUs is the server's clock in microseconds since the Unix epoch:
	// every expiry is the server's, so the clients' clocks never matter.
	nowUs string

	insertItem, item, itemForUpdate   string
	reservationColumns                string
	byRequest, byID, byIDForUpdate    string
	takeStock, confirmStock           string
	returnStock, setState             string
	addToUser, userQty, takeFromUser  string
	insertReservation, overdue, clear string
	// returning is appended to an INSERT of reservations on PostgreSQL.
	returning string

	// The buckets strategy's: $1 is a quantity, $2 the sku, $3 a bucket.
	insertBucketedItem, bucketsAvailable string
	bucketForUpdate, bucketsForUpdate    string
	bucketTake, bucketSet                string
	bucketConfirm, bucketReturn          string
}

const reservationColumns = "id, request_id, user_id, sku, qty, state, reason, expires_us, bucket"

var postgresQueries = queries{
	d:          sqldialect.Postgres,
	nowUs:      sqldialect.PostgresClockMicros,
	insertItem: "INSERT INTO inventory_items (sku, initial, available, per_user_limit) VALUES ($1, $2, $2, $3)",
	item: "SELECT i.initial, i.available + CAST(COALESCE(SUM(b.available), 0) AS bigint), i.reserved + CAST(COALESCE(SUM(b.reserved), 0) AS bigint)," +
		" i.sold + CAST(COALESCE(SUM(b.sold), 0) AS bigint), i.per_user_limit, i.buckets" +
		" FROM inventory_items i LEFT JOIN inventory_buckets b ON b.sku = i.sku WHERE i.sku = $1" +
		" GROUP BY i.sku, i.initial, i.available, i.reserved, i.sold, i.per_user_limit, i.buckets",
	itemForUpdate:      "SELECT available FROM inventory_items WHERE sku = $1 FOR UPDATE",
	reservationColumns: reservationColumns,
	byRequest:          "SELECT " + reservationColumns + " FROM inventory_reservations WHERE request_id = $1",
	byID:               "SELECT " + reservationColumns + " FROM inventory_reservations WHERE id = $1",
	byIDForUpdate: "SELECT " + reservationColumns + ", expires_us <= " + sqldialect.PostgresClockMicros +
		" FROM inventory_reservations WHERE id = $1 FOR UPDATE",
	takeStock:    "UPDATE inventory_items SET available = available - $1, reserved = reserved + $1 WHERE sku = $2 AND available >= $1",
	confirmStock: "UPDATE inventory_items SET reserved = reserved - $1, sold = sold + $1 WHERE sku = $2",
	returnStock:  "UPDATE inventory_items SET reserved = reserved - $1, available = available + $1 WHERE sku = $2",
	setState:     "UPDATE inventory_reservations SET state = $1 WHERE id = $2",
	addToUser: "INSERT INTO inventory_user_items (user_id, sku, qty) VALUES ($1, $2, $3)" +
		" ON CONFLICT (user_id, sku) DO UPDATE SET qty = inventory_user_items.qty + EXCLUDED.qty RETURNING qty",
	userQty:      "SELECT qty FROM inventory_user_items WHERE user_id = $1 AND sku = $2",
	takeFromUser: "UPDATE inventory_user_items SET qty = qty - $1 WHERE user_id = $2 AND sku = $3",
	insertReservation: "INSERT INTO inventory_reservations (request_id, user_id, sku, qty, state, reason, expires_us, bucket)" +
		" VALUES ($1, $2, $3, $4, $5, $6, " + sqldialect.PostgresClockMicros + " + $7, $8) RETURNING " + reservationColumns,
	overdue: "SELECT id FROM inventory_reservations WHERE state = 'reserved'" +
		" AND expires_us <= " + sqldialect.PostgresClockMicros + " ORDER BY expires_us LIMIT $1",
	clear:     "DELETE FROM inventory_reservations WHERE sku = $1",
	returning: " RETURNING " + reservationColumns,

	insertBucketedItem: "INSERT INTO inventory_items (sku, initial, available, per_user_limit, buckets) VALUES ($1, $2, 0, $3, $4)",
	bucketsAvailable:   "SELECT COALESCE(SUM(available), 0) FROM inventory_buckets WHERE sku = $1",
	bucketTake: "UPDATE inventory_buckets SET available = available - $1, reserved = reserved + $1" +
		" WHERE sku = $2 AND bucket = $3 AND available >= $1",
	bucketForUpdate:  "SELECT available FROM inventory_buckets WHERE sku = $1 AND bucket = $2 FOR UPDATE",
	bucketsForUpdate: "SELECT bucket, available FROM inventory_buckets WHERE sku = $1 ORDER BY bucket FOR UPDATE",
	bucketSet:        "UPDATE inventory_buckets SET reserved = reserved + $1, available = $4 WHERE sku = $2 AND bucket = $3",
	bucketConfirm:    "UPDATE inventory_buckets SET reserved = reserved - $1, sold = sold + $1 WHERE sku = $2 AND bucket = $3",
	bucketReturn:     "UPDATE inventory_buckets SET reserved = reserved - $1, available = available + $1 WHERE sku = $2 AND bucket = $3",
}

var mysqlQueries = queries{
	d:          sqldialect.MySQL,
	nowUs:      sqldialect.MySQLClockMicros,
	insertItem: "INSERT INTO inventory_items (sku, initial, available, per_user_limit) VALUES (?, ?, ?, ?)",
	item: "SELECT i.initial, i.available + COALESCE(SUM(b.available), 0), i.reserved + COALESCE(SUM(b.reserved), 0)," +
		" i.sold + COALESCE(SUM(b.sold), 0), i.per_user_limit, i.buckets" +
		" FROM inventory_items i LEFT JOIN inventory_buckets b ON b.sku = i.sku WHERE i.sku = ?" +
		" GROUP BY i.sku, i.initial, i.available, i.reserved, i.sold, i.per_user_limit, i.buckets",
	itemForUpdate:      "SELECT available FROM inventory_items WHERE sku = ? FOR UPDATE",
	reservationColumns: reservationColumns,
	byRequest:          "SELECT " + reservationColumns + " FROM inventory_reservations WHERE request_id = ?",
	byID:               "SELECT " + reservationColumns + " FROM inventory_reservations WHERE id = ?",
	byIDForUpdate: "SELECT " + reservationColumns + ", expires_us <= " + sqldialect.MySQLClockMicros +
		" FROM inventory_reservations WHERE id = ? FOR UPDATE",
	takeStock:    "UPDATE inventory_items SET available = available - ?, reserved = reserved + ? WHERE sku = ? AND available >= ?",
	confirmStock: "UPDATE inventory_items SET reserved = reserved - ?, sold = sold + ? WHERE sku = ?",
	returnStock:  "UPDATE inventory_items SET reserved = reserved - ?, available = available + ? WHERE sku = ?",
	setState:     "UPDATE inventory_reservations SET state = ? WHERE id = ?",
	addToUser: "INSERT INTO inventory_user_items (user_id, sku, qty) VALUES (?, ?, ?)" +
		" ON DUPLICATE KEY UPDATE qty = qty + VALUES(qty)",
	userQty:      "SELECT qty FROM inventory_user_items WHERE user_id = ? AND sku = ?",
	takeFromUser: "UPDATE inventory_user_items SET qty = qty - ? WHERE user_id = ? AND sku = ?",
	insertReservation: "INSERT INTO inventory_reservations (request_id, user_id, sku, qty, state, reason, expires_us, bucket)" +
		" VALUES (?, ?, ?, ?, ?, ?, " + sqldialect.MySQLClockMicros + " + ?, ?)",
	overdue: "SELECT id FROM inventory_reservations WHERE state = 'reserved'" +
		" AND expires_us <= " + sqldialect.MySQLClockMicros + " ORDER BY expires_us LIMIT ?",
	clear: "DELETE FROM inventory_reservations WHERE sku = ?",

	insertBucketedItem: "INSERT INTO inventory_items (sku, initial, available, per_user_limit, buckets) VALUES (?, ?, 0, ?, ?)",
	bucketsAvailable:   "SELECT COALESCE(SUM(available), 0) FROM inventory_buckets WHERE sku = ?",
	bucketTake: "UPDATE inventory_buckets SET available = available - ?, reserved = reserved + ?" +
		" WHERE sku = ? AND bucket = ? AND available >= ?",
	bucketForUpdate:  "SELECT available FROM inventory_buckets WHERE sku = ? AND bucket = ? FOR UPDATE",
	bucketsForUpdate: "SELECT bucket, available FROM inventory_buckets WHERE sku = ? ORDER BY bucket FOR UPDATE",
	bucketSet:        "UPDATE inventory_buckets SET reserved = reserved + ?, available = ? WHERE sku = ? AND bucket = ?",
	bucketConfirm:    "UPDATE inventory_buckets SET reserved = reserved - ?, sold = sold + ? WHERE sku = ? AND bucket = ?",
	bucketReturn:     "UPDATE inventory_buckets SET reserved = reserved - ?, available = available + ? WHERE sku = ? AND bucket = ?",
}

// takeStockArgs are takeStock's arguments in the dialect's order.
func (q *queries) takeStockArgs(sku string, n int64) []any {
	if q.d == sqldialect.Postgres {
		return []any{n, sku}
	}
	return []any{n, n, sku, n}
}

// twice is the arguments of confirmStock and returnStock.
func (q *queries) twice(sku string, n int64) []any {
	if q.d == sqldialect.Postgres {
		return []any{n, sku}
	}
	return []any{n, n, sku}
}

// bucketArgs are bucketConfirm's and bucketReturn's arguments, n units of
// sku's bucket b, in the dialect's order.
func (q *queries) bucketArgs(n int64, sku string, b int) []any {
	return append(q.twice(sku, n), b)
}

// bucketTakeArgs are bucketTake's arguments.
func (q *queries) bucketTakeArgs(n int64, sku string, b int) []any {
	return append(q.bucketArgs(n, sku, b), q.onMySQL(n)...)
}

// bucketSetArgs are bucketSet's: n more units reserved in sku's bucket b,
// which keeps available.
func (q *queries) bucketSetArgs(n int64, sku string, b int, available int64) []any {
	if q.d == sqldialect.Postgres {
		return []any{n, sku, b, available}
	}
	return []any{n, available, sku, b}
}

// onMySQL is args on MySQL, none on PostgreSQL.
func (q *queries) onMySQL(args ...any) []any {
	if q.d == sqldialect.MySQL {
		return args
	}
	return nil
}

// insertBuckets inserts n buckets: rows of (sku, bucket, available).
func (q *queries) insertBuckets(n int) string {
	return "INSERT INTO inventory_buckets (sku, bucket, available) VALUES " + q.rows(n, 3)
}

// list is "p1, p2, …, pn" in the dialect's placeholders from the from-th.
func (q *queries) list(from, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(q.d.Placeholder(from + i))
	}
	return b.String()
}

// byRequests selects the reservations of n request ids.
func (q *queries) byRequests(n int) string {
	return "SELECT " + reservationColumns + " FROM inventory_reservations WHERE request_id IN (" + q.list(1, n) + ")"
}

// usersForUpdate locks n users' rows of an item ($1 is the sku).
func (q *queries) usersForUpdate(n int) string {
	return "SELECT user_id, qty FROM inventory_user_items WHERE sku = " + q.d.Placeholder(1) +
		" AND user_id IN (" + q.list(2, n) + ") FOR UPDATE"
}

// ensureUsers inserts n users' rows of an item, holding nothing, where
// they are missing, and locks them: rows of (user_id, sku).
func (q *queries) ensureUsers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + q.list(2*i+1, 2) + ", 0)")
	}
	conflict := " ON DUPLICATE KEY UPDATE qty = qty"
	if q.d == sqldialect.Postgres {
		conflict = " ON CONFLICT (user_id, sku) DO NOTHING"
	}
	return "INSERT INTO inventory_user_items (user_id, sku, qty) VALUES " + b.String() + conflict
}

// addToUsers adds to n users' units of an item: rows of (user_id, sku, qty).
func (q *queries) addToUsers(n int) string {
	upsert := " ON DUPLICATE KEY UPDATE qty = qty + VALUES(qty)"
	if q.d == sqldialect.Postgres {
		upsert = " ON CONFLICT (user_id, sku) DO UPDATE SET qty = inventory_user_items.qty + EXCLUDED.qty"
	}
	return "INSERT INTO inventory_user_items (user_id, sku, qty) VALUES " + q.rows(n, 3) + upsert
}

// rows is n rows of width placeholders: "(p1, p2), (p3, p4)".
func (q *queries) rows(n, width int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + q.list(width*i+1, width) + ")")
	}
	return b.String()
}

// insertReservations inserts n reservations: rows of (request_id,
// user_id, sku, qty, state, reason, ttl in µs, bucket), each expiring at
// the server's clock plus its ttl.
func (q *queries) insertReservations(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO inventory_reservations (request_id, user_id, sku, qty, state, reason, expires_us, bucket) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + q.list(8*i+1, 6) + ", " + q.nowUs + " + " + q.d.Placeholder(8*i+7) + ", " + q.d.Placeholder(8*i+8) + ")")
	}
	b.WriteString(q.returning)
	return b.String()
}
