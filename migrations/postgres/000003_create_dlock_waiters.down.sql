DROP TABLE dlock_waiters;
