-- Fails while a bucketed item exists: its units are only in its buckets.
ALTER TABLE inventory_items
    DROP CONSTRAINT inventory_items_buckets,
    DROP CONSTRAINT inventory_items_balance,
    ADD CONSTRAINT inventory_items_balance CHECK (available + reserved + sold = initial);
