-- Return a permit. KEYS as sem_acquire.lua; ARGV[1] permit id, ARGV[2]
-- channel, ARGV[3] publish command. Returns 1, or 0 for an unknown (or
-- already expired) permit.
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('hdel', KEYS[2], ARGV[1])
redis.call(ARGV[3], ARGV[2], 'released')
return 1
