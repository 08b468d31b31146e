-- The flash-sale tables of package seckill. fence is the largest fencing
-- token that wrote the row: a write with a smaller one is refused.
CREATE TABLE seckill_goods (
    id      bigint       PRIMARY KEY,
    name    varchar(100) NOT NULL,
    stock   integer      NOT NULL,
    version bigint       NOT NULL DEFAULT 1,
    fence   bigint       NOT NULL DEFAULT 0
);

CREATE TABLE seckill_orders (
    id         bigserial   PRIMARY KEY,
    user_id    bigint      NOT NULL,
    goods_id   bigint      NOT NULL REFERENCES seckill_goods (id),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (user_id, goods_id)
);

-- Segmented stock: one item's stock split over several rows, each locked
-- on its own.
CREATE TABLE seckill_segments (
    goods_id bigint  NOT NULL REFERENCES seckill_goods (id),
    segment  integer NOT NULL,
    stock    integer NOT NULL,
    fence    bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (goods_id, segment)
);
