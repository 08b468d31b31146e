DROP TABLE seckill_segments;
