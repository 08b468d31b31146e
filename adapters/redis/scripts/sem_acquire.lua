-- Semaphore with expiring permits (Redisson's PermitExpirableSemaphore).
-- KEYS[1] permits in use (zset permit id -> server-time ms it expires),
-- KEYS[2] permit sizes (hash permit id -> permits it holds),
-- KEYS[3] fencing counter
-- ARGV[1] capacity, ARGV[2] permits wanted, ARGV[3] permit id, ARGV[4] lease ms
-- Returns {1, token} when granted, {0, ms until the earliest permit
-- expires} when not enough permits are free, held_back_reply's when a
-- restarted server holds grants back (restart_wait).
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
-- Permits whose holder stopped renewing come back.
for _, id in ipairs(redis.call('zrangebyscore', KEYS[1], '-inf', now)) do
  redis.call('hdel', KEYS[2], id)
end
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
local used = 0
for _, n in ipairs(redis.call('hvals', KEYS[2])) do used = used + tonumber(n) end
local want = tonumber(ARGV[2])
if used + want > tonumber(ARGV[1]) then
  local first = redis.call('zrange', KEYS[1], 0, 0, 'withscores')
  return {0, math.max(tonumber(first[2]) - now, 1)}
end
local lease = tonumber(ARGV[4])
local held_back = restart_wait(KEYS[3], lease)
if held_back > 0 then
  return held_back_reply(held_back, held_back)
end
redis.call('zadd', KEYS[1], now + lease, ARGV[3])
redis.call('hset', KEYS[2], ARGV[3], want)
-- The keys outlive the longest lease in them, no more.
local last = redis.call('zrange', KEYS[1], -1, -1, 'withscores')
local keep = math.max(tonumber(last[2]) - now, lease)
redis.call('pexpire', KEYS[1], keep)
redis.call('pexpire', KEYS[2], keep)
return {1, (next_token(KEYS[3]))}
