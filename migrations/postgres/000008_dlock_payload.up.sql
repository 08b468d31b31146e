-- payload is the short text a holder stored with its hold
-- (dlock.WithPayload): who holds the lock and why, shown by Inspect and
-- `dlock ls`; NULL for none. A waiter's queue row carries it too, for a
-- release that grants the lock to that waiter on its behalf. Nullable
-- columns without a default: adding them rewrites no rows.
ALTER TABLE dlock_locks ADD COLUMN IF NOT EXISTS payload varchar(256);
ALTER TABLE dlock_waiters ADD COLUMN IF NOT EXISTS payload varchar(256);
