-- Fencing tokens and holders of package advisory: one row per lock name,
-- written while the lock is held (GET_LOCK is in the same statement). The
-- row's session is the holder's CONNECTION_ID(), so a reader can check it
-- against IS_USED_LOCK() to tell a live holder from a past one.
CREATE TABLE dlock_fences (
    name    VARBINARY(255)  NOT NULL PRIMARY KEY,
    owner   VARBINARY(255)  NOT NULL,
    session BIGINT UNSIGNED NOT NULL,
    token   BIGINT UNSIGNED NOT NULL
) ENGINE=InnoDB;
