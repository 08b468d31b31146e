DROP TABLE seckill_segments, seckill_orders, seckill_goods;
