-- Segmented stock: one item's stock split over several rows, each locked
-- on its own.
CREATE TABLE seckill_segments (
    goods_id BIGINT          NOT NULL,
    segment  INT             NOT NULL,
    stock    INT             NOT NULL,
    fence    BIGINT UNSIGNED NOT NULL DEFAULT 0,
    PRIMARY KEY (goods_id, segment),
    CONSTRAINT seckill_segments_goods FOREIGN KEY (goods_id) REFERENCES seckill_goods (id)
) ENGINE=InnoDB;
