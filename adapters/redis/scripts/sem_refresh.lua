-- Extend a permit's lease. KEYS as sem_acquire.lua; ARGV[1] permit id,
-- ARGV[2] lease ms. Returns 1, or 0 for an unknown (or expired) permit.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then return 0 end
local lease = tonumber(ARGV[2])
redis.call('zadd', KEYS[1], now + lease, ARGV[1])
if redis.call('pttl', KEYS[1]) < lease then
  redis.call('pexpire', KEYS[1], lease)
  redis.call('pexpire', KEYS[2], lease)
end
return 1
