-- The inventory of package inventory. A unit of an item is available,
-- reserved (held for a buyer until the reservation is confirmed, cancelled
-- or expires) or sold; the balance constraint keeps every unit in exactly
-- one of the three in every row a reader can see.
CREATE TABLE inventory_items (
    sku            VARCHAR(64) NOT NULL PRIMARY KEY,
    initial        BIGINT      NOT NULL,
    available      BIGINT      NOT NULL,
    reserved       BIGINT      NOT NULL DEFAULT 0,
    sold           BIGINT      NOT NULL DEFAULT 0,
    per_user_limit INT         NOT NULL DEFAULT 0,
    CONSTRAINT inventory_items_nonnegative CHECK (initial >= 0 AND available >= 0 AND reserved >= 0 AND sold >= 0 AND per_user_limit >= 0),
    CONSTRAINT inventory_items_balance CHECK (available + reserved + sold = initial)
) ENGINE=InnoDB;
