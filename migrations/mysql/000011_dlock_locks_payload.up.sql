-- payload is the short text a holder stored with its hold
-- (dlock.WithPayload): who holds the lock and why, shown by Inspect and
-- `dlock ls`; NULL for none. Bytes, as names are: at most
-- dlock.MaxPayloadLen (256) of them. A nullable column at the end of the
-- table: MariaDB 10.3 and MySQL 8.0 add it without copying the table.
ALTER TABLE dlock_locks ADD COLUMN payload VARBINARY(256) NULL;
