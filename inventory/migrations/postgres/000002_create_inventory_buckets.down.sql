-- Fails while a bucketed item exists: its units are only in its buckets.
DROP TABLE inventory_buckets;
ALTER TABLE inventory_reservations DROP COLUMN bucket;
ALTER TABLE inventory_items DROP CONSTRAINT inventory_items_balance;
ALTER TABLE inventory_items ADD CONSTRAINT inventory_items_balance CHECK (available + reserved + sold = initial);
ALTER TABLE inventory_items DROP COLUMN buckets;
