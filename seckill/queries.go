package seckill

// queries is the SQL of the sale in one dialect, written out for each (a
// DBA reads what runs; nothing is rewritten at run time).
type queries struct {
	deleteOrders, deleteSegments, deleteGoods string
	insertGoods, insertSegment                string
	countOrders, countDuplicates              string
	hasOrdered                                string
	stock, segmentsStock, segmentStock        string
	setStock, decrement, decrementIfAny       string
	fencedDecrement, fencedSegmentDecrement   string
	insertOrder                               string
}

var postgresQueries = queries{
	deleteOrders:           "DELETE FROM seckill_orders WHERE goods_id = $1",
	deleteSegments:         "DELETE FROM seckill_segments WHERE goods_id = $1",
	deleteGoods:            "DELETE FROM seckill_goods WHERE id = $1",
	insertGoods:            "INSERT INTO seckill_goods (id, name, stock) VALUES ($1, $2, $3)",
	insertSegment:          "INSERT INTO seckill_segments (goods_id, segment, stock) VALUES ($1, $2, $3)",
	countOrders:            "SELECT count(*) FROM seckill_orders WHERE goods_id = $1",
	countDuplicates:        "SELECT count(*) FROM (SELECT user_id FROM seckill_orders WHERE goods_id = $1 GROUP BY user_id HAVING count(*) > 1) d",
	hasOrdered:             "SELECT count(*) FROM seckill_orders WHERE user_id = $1 AND goods_id = $2",
	stock:                  "SELECT stock FROM seckill_goods WHERE id = $1",
	segmentsStock:          "SELECT COALESCE(SUM(stock), 0) FROM seckill_segments WHERE goods_id = $1",
	segmentStock:           "SELECT stock FROM seckill_segments WHERE goods_id = $1 AND segment = $2",
	setStock:               "UPDATE seckill_goods SET stock = $1 WHERE id = $2",
	decrement:              "UPDATE seckill_goods SET stock = stock - 1 WHERE id = $1",
	decrementIfAny:         "UPDATE seckill_goods SET stock = stock - 1 WHERE id = $1 AND stock > 0",
	fencedDecrement:        "UPDATE seckill_goods SET stock = stock - 1, fence = $1 WHERE id = $2 AND fence <= $3 AND stock > 0",
	fencedSegmentDecrement: "UPDATE seckill_segments SET stock = stock - 1, fence = $1 WHERE goods_id = $2 AND segment = $3 AND fence <= $4 AND stock > 0",
	insertOrder:            "INSERT INTO seckill_orders (user_id, goods_id) VALUES ($1, $2) RETURNING id",
}

var mysqlQueries = queries{
	deleteOrders:           "DELETE FROM seckill_orders WHERE goods_id = ?",
	deleteSegments:         "DELETE FROM seckill_segments WHERE goods_id = ?",
	deleteGoods:            "DELETE FROM seckill_goods WHERE id = ?",
	insertGoods:            "INSERT INTO seckill_goods (id, name, stock) VALUES (?, ?, ?)",
	insertSegment:          "INSERT INTO seckill_segments (goods_id, segment, stock) VALUES (?, ?, ?)",
	countOrders:            "SELECT count(*) FROM seckill_orders WHERE goods_id = ?",
	countDuplicates:        "SELECT count(*) FROM (SELECT user_id FROM seckill_orders WHERE goods_id = ? GROUP BY user_id HAVING count(*) > 1) d",
	hasOrdered:             "SELECT count(*) FROM seckill_orders WHERE user_id = ? AND goods_id = ?",
	stock:                  "SELECT stock FROM seckill_goods WHERE id = ?",
	segmentsStock:          "SELECT COALESCE(SUM(stock), 0) FROM seckill_segments WHERE goods_id = ?",
	segmentStock:           "SELECT stock FROM seckill_segments WHERE goods_id = ? AND segment = ?",
	setStock:               "UPDATE seckill_goods SET stock = ? WHERE id = ?",
	decrement:              "UPDATE seckill_goods SET stock = stock - 1 WHERE id = ?",
	decrementIfAny:         "UPDATE seckill_goods SET stock = stock - 1 WHERE id = ? AND stock > 0",
	fencedDecrement:        "UPDATE seckill_goods SET stock = stock - 1, fence = ? WHERE id = ? AND fence <= ? AND stock > 0",
	fencedSegmentDecrement: "UPDATE seckill_segments SET stock = stock - 1, fence = ? WHERE goods_id = ? AND segment = ? AND fence <= ? AND stock > 0",
	insertOrder:            "INSERT INTO seckill_orders (user_id, goods_id) VALUES (?, ?)",
}
