DROP TABLE dlock_records;
