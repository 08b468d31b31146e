ALTER TABLE inventory_reservations DROP COLUMN bucket;
