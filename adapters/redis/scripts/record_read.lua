-- Read a record (dlock.Recorder). KEYS[1] the record's hash.
-- Returns false when there is none, else {token, value, age in µs by the
-- server's clock since the token first wrote it}.
local r = redis.call('hmget', KEYS[1], 't', 'v', 's')
if not r[1] then
  return false
end
local now = redis.call('time')
local age = now[1] * 1000000 + now[2] - tonumber(r[3])
return {r[1], r[2], math.max(age, 0)}
