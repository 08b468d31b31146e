DROP TABLE inventory_user_items;
DROP TABLE inventory_reservations;
DROP TABLE inventory_items;
