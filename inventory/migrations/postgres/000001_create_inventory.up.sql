-- The inventory of package inventory. A unit of an item is available,
-- reserved (held for a buyer until the reservation is confirmed, cancelled
-- or expires) or sold; the balance constraint keeps every unit in exactly
-- one of the three in every row a reader can see.
CREATE TABLE inventory_items (
    sku            varchar(64) PRIMARY KEY,
    initial        bigint      NOT NULL CHECK (initial >= 0),
    available      bigint      NOT NULL CHECK (available >= 0),
    reserved       bigint      NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    sold           bigint      NOT NULL DEFAULT 0 CHECK (sold >= 0),
    per_user_limit integer     NOT NULL DEFAULT 0 CHECK (per_user_limit >= 0),
    CONSTRAINT inventory_items_balance CHECK (available + reserved + sold = initial)
);

-- One row per request id, whatever its outcome: a retried request finds
-- the first outcome here. state is reserved, confirmed, cancelled, expired
-- or rejected (reason: sold_out or limit). expires_us is the server's
-- clock, in microseconds since the Unix epoch.
CREATE TABLE inventory_reservations (
    id         bigserial   PRIMARY KEY,
    request_id varchar(64) NOT NULL UNIQUE,
    user_id    bigint      NOT NULL,
    sku        varchar(64) NOT NULL REFERENCES inventory_items (sku),
    qty        integer     NOT NULL CHECK (qty > 0),
    state      varchar(10) NOT NULL,
    reason     varchar(16) NOT NULL DEFAULT '',
    expires_us bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- The sweeper's scan: reservations still held, oldest expiry first.
CREATE INDEX inventory_reservations_expiry ON inventory_reservations (expires_us) WHERE state = 'reserved';

-- Units each user holds of each item (reserved or sold), for the per-user
-- limit.
CREATE TABLE inventory_user_items (
    user_id bigint      NOT NULL,
    sku     varchar(64) NOT NULL REFERENCES inventory_items (sku),
    qty     bigint      NOT NULL CHECK (qty >= 0),
    PRIMARY KEY (user_id, sku)
);
