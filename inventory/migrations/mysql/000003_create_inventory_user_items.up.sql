-- Units each user holds of each item (reserved or sold), for the per-user
-- limit.
CREATE TABLE inventory_user_items (
    user_id BIGINT      NOT NULL,
    sku     VARCHAR(64) NOT NULL,
    qty     BIGINT      NOT NULL,
    PRIMARY KEY (user_id, sku),
    CONSTRAINT inventory_user_items_qty CHECK (qty >= 0),
    CONSTRAINT inventory_user_items_item FOREIGN KEY (sku) REFERENCES inventory_items (sku)
) ENGINE=InnoDB;
