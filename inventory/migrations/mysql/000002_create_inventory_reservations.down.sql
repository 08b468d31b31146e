DROP TABLE inventory_reservations;
