ALTER TABLE inventory_items DROP COLUMN buckets;
