-- The processes waiting for a lock of package tablelock, one row per lock
-- name and waiting process (pid is the backend pid of the process's LISTEN
-- connection). A release notifies the longest waiting live process, not
-- every listening one, so a hand-off costs a few statements however many
-- processes wait.
-- UNLOGGED: writing a row waits for no WAL flush, and nothing is lost that
-- matters. The rows only steer wake-ups: a crash or a failover empties the
-- table, releases then wake one waiter in every listening process, as
-- before this table, and every waiter registers again on its next attempt.
-- Rows expire (expires_at) when their process stops refreshing them.
CREATE UNLOGGED TABLE dlock_waiters (
    name       varchar(255) NOT NULL,
    pid        integer      NOT NULL,
    since      timestamptz  NOT NULL,
    expires_at timestamptz  NOT NULL,
    PRIMARY KEY (name, pid)
);
