ALTER TABLE dlock_waiters DROP COLUMN payload;
ALTER TABLE dlock_locks DROP COLUMN payload;
