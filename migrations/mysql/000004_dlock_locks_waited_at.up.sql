-- waited_at is when a waiter last found the lock held by another owner.
-- A Locker whose goroutines pass a lock straight from one to the next
-- (dlock.WithHandOffs) does so only while nobody else has asked for it in
-- the last second, so waiters in other processes, which poll, find the
-- lock released between holds. It is written by failed acquire attempts,
-- in the statement they already run; NULL until the first.
ALTER TABLE dlock_locks ADD COLUMN waited_at DATETIME(6) NULL;
