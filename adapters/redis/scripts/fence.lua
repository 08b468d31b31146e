-- Redlock: record the token chosen for a hold on this server.
-- KEYS[1] lock hash, KEYS[2] fencing counter; ARGV[1] hold id, ARGV[2] token
-- Raises the counter to the token (never lowers it) and stores the token
-- in the lock if the hold is still there. Returns 1 if it is, else 0.
local token = tonumber(ARGV[2])
if tonumber(redis.call('get', KEYS[2]) or '0') < token then
  redis.call('set', KEYS[2], token, 'px', 86400000) -- as token.lua's counters
end
if redis.call('hexists', KEYS[1], '\0h' .. ARGV[1]) == 0 then
  return 0
end
redis.call('hset', KEYS[1], '\0t', token)
return 1
