-- Count a latch down. KEYS[1] count; ARGV[1] channel, ARGV[2] publish
-- command. At zero the latch opens: the key goes and waiters are woken.
-- Returns the count left (0 also when the latch was not set).
local left = tonumber(redis.call('get', KEYS[1]) or '0')
if left <= 0 then return 0 end
left = redis.call('decr', KEYS[1])
if left <= 0 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[2], ARGV[1], 'open')
  return 0
end
return left
