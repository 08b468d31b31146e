-- Fair lock release: as release.lua, then wake only the first waiter.
-- KEYS[1] lock hash, KEYS[3] queue, KEYS[4] queue timeouts
-- ARGV[1] owner, ARGV[2] hold id, ARGV[3] token ('' matches any),
-- ARGV[4] waiter channel prefix, ARGV[5] publish command
local lock, owner, hold = KEYS[1], ARGV[1], '\0h' .. ARGV[2]
-- One read, as release.lua's: the hold, the token and the owner's count.
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
local head = redis.call('lindex', KEYS[3], 0)
if head then
  redis.call(ARGV[5], waiter_channel(ARGV[4], head), 'free')
end
return 0
