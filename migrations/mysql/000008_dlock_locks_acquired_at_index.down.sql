DROP INDEX dlock_locks_acquired_at ON dlock_locks;
