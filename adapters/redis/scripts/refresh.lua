-- Extend a hold.
-- KEYS[1] lock hash; ARGV[1] ttl (ms), ARGV[2] hold id, ARGV[3] token
-- Returns 1 when extended, 0 when the hold is gone.
local lock, ttl = KEYS[1], tonumber(ARGV[1])
-- A key overwritten with another type holds no hold of ours.
if redis.call('type', lock).ok ~= 'hash' then return 0 end
if redis.call('hexists', lock, '\0h' .. ARGV[2]) == 0 or redis.call('hget', lock, '\0t') ~= ARGV[3] then
  return 0
end
if redis.call('pttl', lock) < ttl then
  redis.call('pexpire', lock, ttl)
end
return 1
