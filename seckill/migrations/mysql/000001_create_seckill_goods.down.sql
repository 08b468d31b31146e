DROP TABLE seckill_goods;
