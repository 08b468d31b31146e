DROP TABLE inventory_items;
