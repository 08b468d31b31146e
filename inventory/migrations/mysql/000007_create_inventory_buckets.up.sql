-- One row per bucket of a bucketed item: its share of the item's units.
CREATE TABLE inventory_buckets (
    sku       VARCHAR(64) NOT NULL,
    bucket    INT         NOT NULL,
    available BIGINT      NOT NULL,
    reserved  BIGINT      NOT NULL DEFAULT 0,
    sold      BIGINT      NOT NULL DEFAULT 0,
    PRIMARY KEY (sku, bucket),
    CONSTRAINT inventory_buckets_nonnegative CHECK (bucket > 0 AND available >= 0 AND reserved >= 0 AND sold >= 0),
    CONSTRAINT inventory_buckets_item FOREIGN KEY (sku) REFERENCES inventory_items (sku)
) ENGINE=InnoDB;
