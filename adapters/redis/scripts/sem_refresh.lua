-- Extend a permit's lease. KEYS as sem_acquire.lua; ARGV[1] permit id,
-- ARGV[2] lease ms. Returns 1, or 0 for an unknown (or expired) permit.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires or tonumber(expires) <= now then return 0 end
redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
return 1
