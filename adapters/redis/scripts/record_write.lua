-- Write a record (dlock.Recorder), fenced by the writer's token.
-- KEYS[1] the record's hash; ARGV[1] token, ARGV[2] value.
-- Fields: t the token, v the value, s when t first wrote it (µs, the
-- server's clock). Returns 1 when written, 0 when the record holds a
-- larger token (nothing is written). Tokens are below 2^53 (µs clocks and
-- counters), exact as Lua numbers.
local token = tonumber(ARGV[1])
local now = redis.call('time')
local cur = tonumber(redis.call('hget', KEYS[1], 't') or '0')
if cur > token then
  return 0
end
if cur < token then
  redis.call('hset', KEYS[1], 's', now[1] * 1000000 + now[2])
end
redis.call('hset', KEYS[1], 't', ARGV[1], 'v', ARGV[2])
return 1
