-- The lock table of package tablelock. One row per lock name, kept after
-- release (owner NULL, expires_at in the past) so token only ever grows.
CREATE TABLE dlock_locks (
    name        varchar(255) PRIMARY KEY,
    owner       varchar(255),
    reentry     integer      NOT NULL DEFAULT 0,
    token       bigint       NOT NULL DEFAULT 0 CHECK (token >= 0),
    acquired_at timestamptz,
    expires_at  timestamptz  NOT NULL DEFAULT '-infinity'
);
