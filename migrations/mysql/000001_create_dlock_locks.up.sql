-- The lock table of package tablelock. One row per lock name, kept after
-- release (owner NULL, expires_at in the past) so token only ever grows.
-- Names are bytes (VARBINARY) so that names differing in case or accents
-- are different locks whatever the server's collation. Times are UTC
-- (UTC_TIMESTAMP), independent of session time zones.
CREATE TABLE dlock_locks (
    name        VARBINARY(255)  NOT NULL PRIMARY KEY,
    owner       VARBINARY(255)  NULL,
    reentry     INT             NOT NULL DEFAULT 0,
    token       BIGINT UNSIGNED NOT NULL DEFAULT 0,
    acquired_at DATETIME(6)     NULL,
    expires_at  DATETIME(6)     NOT NULL DEFAULT '1970-01-01 00:00:00'
) ENGINE=InnoDB;
