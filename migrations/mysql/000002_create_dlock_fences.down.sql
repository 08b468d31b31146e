DROP TABLE dlock_fences;
