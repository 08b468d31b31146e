ALTER TABLE dlock_waiters
    DROP COLUMN attempt,
    DROP COLUMN ttl_us,
    DROP COLUMN owner;
