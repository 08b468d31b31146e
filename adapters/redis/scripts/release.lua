-- Give up one hold; the last hold of the owner frees the lock and wakes
-- waiters. Safe to run twice: the hold's field is gone after the first.
-- KEYS[1] lock hash; ARGV[1] owner, ARGV[2] hold id, ARGV[3] token ('' to
-- match any: the hold id alone is unique),
-- ARGV[4] channel, ARGV[5] publish command ('publish', 'spublish', or ''
-- not to wake anyone)
-- Returns the owner's remaining holds, or -1 when the hold was not held.
local lock, owner, hold = KEYS[1], ARGV[1], '\0h' .. ARGV[2]
-- One read: the hold, the token and the owner's count. A key overwritten
-- with another type (the read fails) holds no hold of ours.
local got = redis.pcall('hmget', lock, hold, '\0t', owner)
if got.err or not got[1] or (ARGV[3] ~= '' and got[2] ~= ARGV[3]) then
  return -1
end
local left = tonumber(got[3] or '1') - 1
if left > 0 then
  redis.call('hdel', lock, hold)
  redis.call('hset', lock, owner, left)
  return left
end
redis.call('del', lock)
if ARGV[5] ~= '' then
  redis.call(ARGV[5], ARGV[4], owner)
end
return 0
