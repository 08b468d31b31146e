-- Fencing counter, prepended to the scripts that draw tokens.
-- Every token is a hybrid clock: the larger of the last token + 1 and the
-- server's clock in microseconds. So tokens keep increasing when the
-- counter is lost (a restart without persistence, a flush, its own
-- expiry) or goes back (a failover to a replica that had not seen the
-- last tokens), as long as the servers' clocks do not go back. That also
-- lets the counter expire a day after its last token, so names used once
-- leave nothing behind for good.
local fence_ttl_ms = 86400000

local function clock_us()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- next_token draws a new token from the counter at key.
local function next_token(key)
  local token = math.max(tonumber(redis.call('get', key) or '0') + 1, clock_us())
  redis.call('set', key, string.format('%.0f', token), 'px', fence_ttl_ms)
  return token
end

-- last_token is the counter at key, started from the clock if missing.
local function last_token(key)
  local last = redis.call('get', key)
  if last then
    return tonumber(last)
  end
  local now = clock_us()
  redis.call('set', key, string.format('%.0f', now), 'px', fence_ttl_ms)
  return now
end
