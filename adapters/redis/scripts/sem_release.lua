-- Return a permit. KEYS as sem_acquire.lua; ARGV[1] permit id, ARGV[2]
-- channel, ARGV[3] publish command. Returns 1, 0 for an unknown permit,
-- -1 for one whose lease had run out (its permits were already free for
-- others: the holder was not protected to the end).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = redis.call('zscore', KEYS[1], ARGV[1])
if not expires then return 0 end
redis.call('zrem', KEYS[1], ARGV[1])
redis.call('hdel', KEYS[2], ARGV[1])
redis.call(ARGV[3], ARGV[2], 'released')
if tonumber(expires) <= now then return -1 end
return 1
