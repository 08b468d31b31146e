-- Read-write lock: many readers or one writer; re-entrant per owner; a
-- writer may also take the read lock (downgrade), not the reverse (two
-- readers upgrading would wait for each other forever).
-- KEYS[1] hash: 'mode' = 'read'|'write', 'r:'..owner / 'w:'..owner = hold
--         count, '\0h'..hold = 'r:'..owner or 'w:'..owner, '\0t' = token
-- KEYS[2] fencing counter, KEYS[3] zset hold -> server-time ms it expires
-- ARGV[1] op: 'read', 'write', 'refresh', 'release'
-- ARGV[2] owner, ARGV[3] hold id, ARGV[4] ttl ms, ARGV[5] channel,
-- ARGV[6] publish command, ARGV[7] '1' when a read or write attempt will
-- wait if not granted: then it marks the lock ('\0w'), and only a
-- marked lock's release publishes
-- read/write return {1, token} or {0, ms to wait}, or held_back_reply's
-- (restart_wait); refresh returns
-- {1} or {0}; release returns {0} or {-1} when not held.
local key, holds = KEYS[1], KEYS[3]
local op, owner, hold, ttl = ARGV[1], ARGV[2], '\0h' .. ARGV[3], tonumber(ARGV[4])
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function drop(h)
  local who = redis.call('hget', key, h)
  redis.call('hdel', key, h)
  redis.call('zrem', holds, h)
  if who and redis.call('hincrby', key, who, -1) <= 0 then
    redis.call('hdel', key, who)
  end
end

-- settle fixes the mode after holds went; it wakes waiters, if any
-- marked the lock, when it became free or writable-to-readable.
local function settle()
  local writers, readers, marked = false, false, false
  for _, f in ipairs(redis.call('hkeys', key)) do
    local p = string.sub(f, 1, 2)
    if p == 'w:' then writers = true elseif p == 'r:' then readers = true elseif f == '\0w' then marked = true end
  end
  local before = redis.call('hget', key, 'mode')
  if writers then return end
  if readers then
    redis.call('hset', key, 'mode', 'read')
  else
    redis.call('del', key, holds)
  end
  if marked and (before == 'write' or not readers) then
    redis.call(ARGV[6], ARGV[5], 'released')
  end
end

-- Holds whose owners stopped renewing go.
local expired = redis.call('zrangebyscore', holds, '-inf', now)
for _, h in ipairs(expired) do drop(h) end
if #expired > 0 then settle() end

local function grant(kind, token)
  local field = kind .. owner
  if redis.call('hexists', key, hold) == 0 then
    redis.call('hincrby', key, field, 1)
    redis.call('hset', key, hold, field)
  end
  redis.call('zadd', holds, now + ttl, hold)
  if redis.call('pttl', key) < ttl then redis.call('pexpire', key, ttl) end
  redis.call('pexpire', holds, math.max(redis.call('pttl', key), ttl))
  return {1, token}
end

local got = redis.call('hmget', key, 'mode', '\0w')
local mode, marked = got[1], got[2]
-- wait tells a waiter to try again when the earliest hold expires (a
-- holder that died frees its part then), at the latest, and marks the
-- held lock for a release to wake it.
local function wait()
  if ARGV[7] == '1' and not marked then
    redis.call('hset', key, '\0w', 1)
  end
  local first = redis.call('zrange', holds, 0, 0, 'withscores')
  if first[2] then return {0, math.max(tonumber(first[2]) - now, 1)} end
  local left = redis.call('pttl', key)
  if left < 0 then left = ttl end
  return {0, left}
end

-- A restarted server holds grants of a free lock back (restart_wait).
if not mode and (op == 'write' or op == 'read') then
  local held_back = restart_wait(KEYS[2], ttl)
  if held_back > 0 then
    return held_back_reply(held_back, held_back)
  end
end

if op == 'write' then
  if not mode then
    local token = next_token(KEYS[2])
    redis.call('hset', key, 'mode', 'write', '\0t', token)
    return grant('w:', token)
  end
  if mode == 'write' and redis.call('hexists', key, 'w:' .. owner) == 1 then
    return grant('w:', tonumber(redis.call('hget', key, '\0t')))
  end
  return wait()
elseif op == 'read' then
  local token = last_token(KEYS[2])
  if not mode then
    redis.call('hset', key, 'mode', 'read', '\0t', token)
    return grant('r:', token)
  end
  if mode == 'read' or redis.call('hexists', key, 'w:' .. owner) == 1 then
    return grant('r:', tonumber(redis.call('hget', key, '\0t')))
  end
  return wait()
elseif op == 'refresh' then
  if redis.call('hexists', key, hold) == 0 then return {0} end
  redis.call('zadd', holds, now + ttl, hold)
  if redis.call('pttl', key) < ttl then redis.call('pexpire', key, ttl) end
  redis.call('pexpire', holds, math.max(redis.call('pttl', key), ttl))
  return {1}
else
  if redis.call('hexists', key, hold) == 0 then return {-1} end
  drop(hold)
  settle()
  return {0}
end
