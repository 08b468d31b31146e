-- A bucketed item's counts are the sums of its buckets': its own row's
-- stay 0, and every transaction keeps the buckets' sums balanced (units
-- move within a bucket, or between buckets under the locks of all of
-- them).
ALTER TABLE inventory_items
    DROP CONSTRAINT inventory_items_balance,
    ADD CONSTRAINT inventory_items_balance CHECK (available + reserved + sold = CASE WHEN buckets = 0 THEN initial ELSE 0 END),
    ADD CONSTRAINT inventory_items_buckets CHECK (buckets >= 0);
