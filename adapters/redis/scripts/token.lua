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

-- counters holds the counters this run has read or written (false when
-- missing), so that a script reads each one once; before, what each held
-- when this run first read it.
local counters, before = {}, {}

local function counter(key)
  local value = counters[key]
  if value == nil then
    value = redis.call('get', key)
    counters[key] = value
    before[key] = value
  end
  return value
end

local function set_counter(key, token)
  local value = string.format('%.0f', token)
  redis.call('set', key, value, 'px', fence_ttl_ms)
  counters[key] = value
end

-- next_token draws a new token from the counter at key, and tells
-- whether the counter existed. Unless this run has read the counter
-- already, one call reads and writes it (SET with GET, Redis 6.2 and
-- later), betting on the clock being ahead of it, as it is unless tokens
-- come faster than one a microsecond or the clock went back; a lost bet
-- costs a second SET.
local function next_token(key)
  local now = clock_us()
  local last = counters[key]
  if last == nil then
    local value = string.format('%.0f', now)
    last = redis.call('set', key, value, 'px', fence_ttl_ms, 'get')
    counters[key] = value
    before[key] = last
    if tonumber(last or '0') < now then
      return now, last ~= false
    end
  end
  local token = math.max(tonumber(last or '0') + 1, now)
  set_counter(key, token)
  return token, last ~= false
end

-- last_token is the counter at key, started from the clock if missing,
-- and whether it existed.
local function last_token(key)
  local last = counter(key)
  if last then
    return tonumber(last), true
  end
  local now = clock_us()
  set_counter(key, now)
  return now, false
end

-- restart_wait is how long, in ms, a grant of a lease of ttl ms of the
-- name whose counter is at key must wait because the server may have lost
-- a lock that a holder still believes it has. A restart loses locks
-- whatever persisted: without persistence the server comes back empty;
-- from an RDB snapshot or an AOF behind its last writes it comes back
-- with the fencing counters of earlier holds but not the current
-- holder's lock. So a server that has been up for less than ttl
-- (uptime counts from the start of this process, the run its run_id
-- names) grants a name only if this process drew its last token: tokens
-- are the server's clock in microseconds (or just above it), so a counter
-- newer than the process's start tells the name's holds since the start
-- were granted here, where their locks are. A missing counter, or one
-- restored from disk, holds the grant back until the server has surely
-- been up for ttl (Redlock's "delayed restart", kept by the server
-- itself; its uptime is in whole seconds, so up to a second more). A
-- server that does not report its uptime gets no wait.
--
-- hold_back_window, when a script sets it from its caller's argument,
-- stands for ttl: the longest lease the caller says any holder of the
-- server uses (redislock.WithRestartWindow), or 0 where the server
-- cannot lose an acknowledged hold (AOF with appendfsync always).
local hold_back_window = nil
-- up_ms is the server's uptime in ms as restart_wait last read it.
local up_ms = 0

-- held_back_reply is the reply of an attempt held back: {0, ms to retry
-- in, the server's uptime (ms), ms until grants resume}.
local function held_back_reply(retry, wait)
  return {0, retry, up_ms, wait}
end

local function restart_wait(key, ttl)
  if hold_back_window then
    ttl = hold_back_window
  end
  if ttl <= 0 then
    return 0
  end
  local up = string.match(redis.call('info', 'server'), 'uptime_in_seconds:(%d+)')
  if not up then
    return 0
  end
  up_ms = tonumber(up) * 1000
  -- uptime_in_seconds is the difference of two clocks in whole seconds
  -- (now's and the start's, each rounded down): the process has been up
  -- for more than up - 1 seconds, and may have been for little more. So
  -- it started after now - up but before now - (up - 1), and a token
  -- above the latter was drawn by it.
  local surely = (tonumber(up) - 1) * 1000
  local wait = math.max(ttl - surely, 0)
  counter(key)
  local last = before[key]
  if wait > 0 and last and tonumber(last) > clock_us() - surely * 1000 then
    return 0
  end
  return wait
end

-- hold_back is restart_wait after a token was drawn from the counter at
-- key, which existed if had: when the grant must wait, the counter goes
-- back to what it held before the draw (missing, if it was). A drawn
-- token left in it would be newer than the process's start, and tell the
-- next attempt that this process granted the name's last hold: it would
-- be let in while the holder the restart forgot still believes it holds.
local function hold_back(key, had, ttl)
  local wait = restart_wait(key, ttl)
  if wait > 0 then
    if had then
      redis.call('set', key, before[key], 'px', fence_ttl_ms)
    else
      redis.call('del', key)
    end
    counters[key] = before[key]
  end
  return wait
end
