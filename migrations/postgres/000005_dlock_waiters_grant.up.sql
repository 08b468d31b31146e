-- owner, ttl_us, attempt: what the queued process's last waiting attempt
-- asked for (the hold's owner id and TTL in µs, and the attempt's number
-- in that process). A release that frees the lock grants it to the head
-- of the queue in the same statement, for that owner with the next
-- token, until the TTL or, if sooner, the row's expires_at (a process
-- that stopped attempting blocks the lock no longer than its place in
-- the queue would have), and notifies the process; the waiter takes it without a
-- statement of its own. The attempt number tells the waiter which of its
-- requests the server had seen, so its lease counts from before the
-- grant. NULL owner (a row written by a version before these columns, or
-- by a process whose waiter left): the release wakes the process, as
-- before.
ALTER TABLE dlock_waiters
    ADD COLUMN owner   varchar(255),
    ADD COLUMN ttl_us  bigint,
    ADD COLUMN attempt bigint;
