-- own_channel: the queued process also listens on a channel of its own,
-- dlock_locks_<pid>, and a release that wakes it notifies it there. Every
-- listening session in the database is signalled by a notification on any
-- channel, but only the sessions listening on that channel pass it to
-- their process: on the shared channel (dlock_locks) every waiting
-- process received, and discarded, every release of every name.
-- false for a process of a version before this column, which listens on
-- the shared channel only and is notified there, as before.
ALTER TABLE dlock_waiters ADD COLUMN own_channel boolean NOT NULL DEFAULT false;
