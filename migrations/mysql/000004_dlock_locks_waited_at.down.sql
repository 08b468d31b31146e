ALTER TABLE dlock_locks DROP COLUMN waited_at;
