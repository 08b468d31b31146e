-- Permits free now. KEYS as sem_acquire.lua; ARGV[1] capacity.
-- Returns {free, in use}; expired permits count as free.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local used = 0
for _, id in ipairs(redis.call('zrangebyscore', KEYS[1], '(' .. now, '+inf')) do
  used = used + tonumber(redis.call('hget', KEYS[2], id) or '0')
end
return {tonumber(ARGV[1]) - used, used}
