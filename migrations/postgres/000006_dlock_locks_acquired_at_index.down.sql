DROP INDEX IF EXISTS dlock_locks_acquired_at;
