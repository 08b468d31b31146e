-- One row per request id, whatever its outcome: a retried request finds
-- the first outcome here. state is reserved, confirmed, cancelled, expired
-- or rejected (reason: sold_out or limit). expires_us is the server's
-- clock, in microseconds since the Unix epoch. The (state, expires_us)
-- index is the sweeper's scan.
CREATE TABLE inventory_reservations (
    id         BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    request_id VARCHAR(64) NOT NULL,
    user_id    BIGINT      NOT NULL,
    sku        VARCHAR(64) NOT NULL,
    qty        INT         NOT NULL,
    state      VARCHAR(10) NOT NULL,
    reason     VARCHAR(16) NOT NULL DEFAULT '',
    expires_us BIGINT      NOT NULL,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    UNIQUE KEY inventory_reservations_request (request_id),
    KEY inventory_reservations_expiry (state, expires_us),
    CONSTRAINT inventory_reservations_qty CHECK (qty > 0),
    CONSTRAINT inventory_reservations_item FOREIGN KEY (sku) REFERENCES inventory_items (sku)
) ENGINE=InnoDB;
