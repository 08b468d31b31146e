-- Give up one hold (drop_hold); the last hold of the owner frees the lock
-- and wakes waiters, if a waiter marked it (acquire.lua).
-- KEYS[1] lock hash; ARGV[1] owner, ARGV[2] hold id, ARGV[3] token ('' to
-- match any), ARGV[4] channel, ARGV[5] publish command ('publish',
-- 'spublish', or '' not to wake anyone)
-- Returns the owner's remaining holds, or -1 when the hold was not held.
local left, waited = drop_hold(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if left == 0 and waited and ARGV[5] ~= '' then
  redis.call(ARGV[5], ARGV[4], ARGV[1])
end
return left
