-- An index on acquired_at lets tablelock.Prune delete idle rows in small
-- batches, oldest first, each batch reading only the rows it deletes
-- (and the few long holds among them), instead of one DELETE that scans
-- the whole table while renewals wait on its row locks. InnoDB builds it
-- online: writes to dlock_locks go on while it is built.
CREATE INDEX dlock_locks_acquired_at ON dlock_locks (acquired_at);
