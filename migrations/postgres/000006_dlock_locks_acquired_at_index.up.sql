-- An index on acquired_at lets tablelock.Prune delete idle rows in small
-- batches, oldest first (rows never acquired, NULL, before all others),
-- each batch reading only the rows it deletes, instead of one DELETE that
-- scans the whole table. Building it blocks writes to dlock_locks for the
-- time it takes; on a large table a DBA may first run
--   CREATE INDEX CONCURRENTLY IF NOT EXISTS dlock_locks_acquired_at
--       ON dlock_locks (acquired_at NULLS FIRST);
-- by hand, which this migration then leaves as it is.
CREATE INDEX IF NOT EXISTS dlock_locks_acquired_at ON dlock_locks (acquired_at NULLS FIRST);
