-- Give up one hold; the last hold of the owner frees the lock and wakes
-- waiters. Safe to run twice: the hold's field is gone after the first.
-- KEYS[1] lock hash; ARGV[1] owner, ARGV[2] hold id, ARGV[3] token ('' to
-- match any: the hold id alone is unique),
-- ARGV[4] channel, ARGV[5] publish command ('publish', 'spublish', or ''
-- not to wake anyone)
-- Returns the owner's remaining holds, or -1 when the hold was not held.
local lock, owner, hold = KEYS[1], ARGV[1], '\0h' .. ARGV[2]
-- A key overwritten with another type holds no hold of ours.
if redis.call('type', lock).ok ~= 'hash' then return -1 end
if redis.call('hexists', lock, hold) == 0 or (ARGV[3] ~= '' and redis.call('hget', lock, '\0t') ~= ARGV[3]) then
  return -1
end
redis.call('hdel', lock, hold)
local left = redis.call('hincrby', lock, owner, -1)
if left > 0 then
  return left
end
redis.call('del', lock)
if ARGV[5] ~= '' then
  redis.call(ARGV[5], ARGV[4], owner)
end
return 0
