DROP TABLE inventory_user_items;
