-- Give up one hold (drop_hold); the last hold of the owner frees the lock
-- and wakes a waiter, if a waiter marked it (acquire.lua): the next one of
-- the lock's waiters (lock_waiters.lua).
-- KEYS[1] lock hash, KEYS[2] waiters; ARGV[1] owner, ARGV[2] hold id,
-- ARGV[3] token ('' to match any), ARGV[4] channel, ARGV[5] publish
-- command ('publish', 'spublish', or '' not to wake anyone), ARGV[6] ms
-- the lock is kept for the waiter woken (see wake_next)
-- Returns the owner's remaining holds, or -1 when the hold was not held.
local left, waited = drop_hold(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if left == 0 and waited and ARGV[5] ~= '' then
  wake_next(KEYS[2], ARGV[5], ARGV[4], ARGV[1], KEYS[1], ARGV[6])
end
return left
