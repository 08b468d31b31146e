DROP TABLE dlock_locks;
