ALTER TABLE dlock_locks DROP COLUMN payload;
