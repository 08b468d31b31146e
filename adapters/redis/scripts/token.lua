-- Fencing counter, prepended to the scripts that draw tokens.
-- The counter starts at the server's clock in microseconds, not at zero,
-- so tokens keep increasing after the counter is lost (a restart without
-- persistence, a failover to a replica that had not seen it, a flush, or
-- its own expiry), as long as the server's clock does not go back and no
-- more than one token is drawn per microsecond. That also lets the counter
-- expire a day after its last token, so names used once leave nothing
-- behind for good.
local fence_ttl_ms = 86400000

local function start_counter(key)
  if redis.call('exists', key) == 0 then
    local t = redis.call('time')
    redis.call('set', key, t[1] .. string.rep('0', 6 - #t[2]) .. t[2], 'px', fence_ttl_ms)
  end
end

-- next_token draws a new token from the counter at key.
local function next_token(key)
  start_counter(key)
  local token = redis.call('incr', key)
  redis.call('pexpire', key, fence_ttl_ms)
  return token
end

-- last_token is the counter at key, started if missing.
local function last_token(key)
  start_counter(key)
  return tonumber(redis.call('get', key))
end
