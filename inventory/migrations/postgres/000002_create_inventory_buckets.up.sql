-- The buckets strategy splits an item's stock over rows of
-- inventory_buckets, so buyers of one hot item lock different rows. A
-- bucketed item's own row keeps its initial units, its per-user limit and
-- how many buckets it has; its counts are the sums of its buckets', and
-- every transaction keeps those sums balanced (units move within a bucket,
-- or between buckets under the locks of all of them).
ALTER TABLE inventory_items ADD COLUMN buckets integer NOT NULL DEFAULT 0 CHECK (buckets >= 0);
ALTER TABLE inventory_items DROP CONSTRAINT inventory_items_balance;
ALTER TABLE inventory_items ADD CONSTRAINT inventory_items_balance
    CHECK (available + reserved + sold = CASE WHEN buckets = 0 THEN initial ELSE 0 END);

-- The bucket a reservation's units came from (0: the item's row).
ALTER TABLE inventory_reservations ADD COLUMN bucket integer NOT NULL DEFAULT 0;

CREATE TABLE inventory_buckets (
    sku       varchar(64) NOT NULL REFERENCES inventory_items (sku),
    bucket    integer     NOT NULL CHECK (bucket > 0),
    available bigint      NOT NULL CHECK (available >= 0),
    reserved  bigint      NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    sold      bigint      NOT NULL DEFAULT 0 CHECK (sold >= 0),
    PRIMARY KEY (sku, bucket)
);
