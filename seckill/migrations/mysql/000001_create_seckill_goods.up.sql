-- The flash-sale goods of package seckill. fence is the largest fencing
-- token that wrote the row: a write with a smaller one is refused.
CREATE TABLE seckill_goods (
    id      BIGINT          NOT NULL PRIMARY KEY,
    name    VARCHAR(100)    NOT NULL,
    stock   INT             NOT NULL,
    version BIGINT          NOT NULL DEFAULT 1,
    fence   BIGINT UNSIGNED NOT NULL DEFAULT 0
) ENGINE=InnoDB;
