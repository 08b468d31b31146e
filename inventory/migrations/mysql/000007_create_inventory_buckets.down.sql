DROP TABLE inventory_buckets;
