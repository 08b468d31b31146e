-- Fair lock release: as release.lua, then wake only the first waiter.
-- KEYS[1] lock hash, KEYS[3] queue, KEYS[4] queue timeouts
-- ARGV[1] owner, ARGV[2] hold id, ARGV[3] token ('' matches any),
-- ARGV[4] waiter channel prefix, ARGV[5] publish command
local lock, owner, hold = KEYS[1], ARGV[1], '\0h' .. ARGV[2]
if redis.call('type', lock).ok ~= 'hash' then return -1 end
if redis.call('hexists', lock, hold) == 0 or (ARGV[3] ~= '' and redis.call('hget', lock, '\0t') ~= ARGV[3]) then
  return -1
end
redis.call('hdel', lock, hold)
local left = redis.call('hincrby', lock, owner, -1)
if left > 0 then return left end
redis.call('del', lock)
local head = redis.call('lindex', KEYS[3], 0)
if head then
  redis.call(ARGV[5], ARGV[4] .. head, 'free')
end
return 0
