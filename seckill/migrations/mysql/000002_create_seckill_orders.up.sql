-- One order per user per item: the unique key makes retries idempotent.
CREATE TABLE seckill_orders (
    id         BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    user_id    BIGINT      NOT NULL,
    goods_id   BIGINT      NOT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    UNIQUE KEY seckill_orders_user_goods (user_id, goods_id),
    CONSTRAINT seckill_orders_goods FOREIGN KEY (goods_id) REFERENCES seckill_goods (id)
) ENGINE=InnoDB;
