-- The buckets strategy splits an item's stock over rows of
-- inventory_buckets (000007), so buyers of one hot item lock different
-- rows. buckets is how many a bucketed item has; 0 for an item whose
-- counts are in its own row.
ALTER TABLE inventory_items ADD COLUMN buckets INT NOT NULL DEFAULT 0;
