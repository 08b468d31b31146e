ALTER TABLE dlock_waiters DROP COLUMN own_channel;
