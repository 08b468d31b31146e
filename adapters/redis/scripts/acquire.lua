-- Take, re-enter or report a lock.
-- KEYS[1] lock hash: field <owner> = hold count, '\0t' = token,
--         '\0h'..<hold id> = 1 for each hold (Locker) of the owner
-- KEYS[2] fencing counter, KEYS[3] waiters (see lock_waiters.lua)
-- ARGV[1] owner, ARGV[2] ttl (ms), ARGV[3] hold id,
-- ARGV[4] '1' to draw the token from the counter here; '0' for Redlock,
--         which sets the token afterwards (see fence.lua)
-- ARGV[5] '1' when the caller will wait for a release if it is not
--         granted: it marks the lock ('\0w'), so that the release
--         publishes (release.lua); a release nobody waits for does not
-- ARGV[6] the waiter's id ('' for none: it is woken by any release),
-- ARGV[7] how long its entry among the waiters lasts unrefreshed (ms),
-- ARGV[8] '1' when the waiter may have an entry from an earlier attempt
-- ARGV[9] the hold's payload ('' for none), kept in field '\0p'
-- ARGV[10] the restart hold-back window in ms ('' for the TTL; see
--          hold_back_window)
-- A grant keeps the server's time of it (ms) in field '\0a', for Inspect.
-- Returns {1, token} when held by owner, {0, pttl} when held by another
-- (or kept for the waiter a release woke),
-- held_back_reply's when a restarted server holds grants back
-- (restart_wait).
local lock, owner, ttl, hold = KEYS[1], ARGV[1], tonumber(ARGV[2]), '\0h' .. ARGV[3]
if ARGV[10] and ARGV[10] ~= '' then
  hold_back_window = tonumber(ARGV[10])
end

-- take grants the free lock to owner.
local function take()
  local token, had
  if ARGV[4] == '1' then
    token, had = next_token(KEYS[2])
  else
    token, had = last_token(KEYS[2])
  end
  local wait = hold_back(KEYS[2], had, ttl)
  if wait > 0 then
    return held_back_reply(wait, wait)
  end
  if ARGV[8] == '1' then
    -- A waiter that takes the lock leaves the waiters.
    redis.call('zrem', KEYS[3], ARGV[6])
  end
  local t = redis.call('time')
  local at = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if redis.call('zcard', KEYS[3]) > 0 then
    -- Others wait: this hold's release must wake one (release.lua).
    redis.call('hset', lock, owner, 1, '\0t', token, hold, 1, '\0a', at, '\0w', 1)
  else
    redis.call('hset', lock, owner, 1, '\0t', token, hold, 1, '\0a', at)
  end
  if ARGV[9] ~= '' then
    redis.call('hset', lock, '\0p', ARGV[9])
  end
  redis.call('pexpire', lock, ttl)
  return {1, token}
end

-- pttl is -2 for a free lock: one read tells free, or how long it is held.
local pttl = redis.call('pttl', lock)
if pttl == -2 then
  return take()
end

-- One read: the owner's count, this hold, the token, the mark, and the
-- waiter a release keeps the free lock for (lock_waiters.lua).
local got = redis.call('hmget', lock, owner, hold, '\0t', '\0w', '\0r')
if got[1] then
  -- A retried acquire of the same hold must not count it twice.
  if not got[2] then
    redis.call('hincrby', lock, owner, 1)
    redis.call('hset', lock, hold, 1)
  end
  if pttl < ttl then
    redis.call('pexpire', lock, ttl)
  end
  return {1, tonumber(got[3])}
end

if got[5] and got[5] == ARGV[6] then
  -- Kept for this waiter by the release that woke it.
  redis.call('del', lock)
  return take()
end

if ARGV[5] == '1' then
  if not got[4] then
    redis.call('hset', lock, '\0w', 1)
  end
  if ARGV[6] ~= '' then
    local t = redis.call('time')
    local expires = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[7])
    redis.call('zadd', KEYS[3], expires, ARGV[6])
    redis.call('pexpire', KEYS[3], ARGV[7])
  end
end
return {0, pttl}
