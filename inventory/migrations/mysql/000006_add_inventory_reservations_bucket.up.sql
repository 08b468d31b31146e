-- The bucket a reservation's units came from (0: the item's row).
ALTER TABLE inventory_reservations ADD COLUMN bucket INT NOT NULL DEFAULT 0;
