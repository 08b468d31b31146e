DROP TABLE seckill_orders;
