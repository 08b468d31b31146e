-- Take, re-enter or report a lock.
-- KEYS[1] lock hash: field <owner> = hold count, '\0t' = token,
--         '\0h'..<hold id> = 1 for each hold (Locker) of the owner
-- KEYS[2] fencing counter
-- ARGV[1] owner, ARGV[2] ttl (ms), ARGV[3] hold id,
-- ARGV[4] '1' to draw the token from the counter here; '0' for Redlock,
--         which sets the token afterwards (see fence.lua)
-- ARGV[5] '1' when the caller will wait for a release if it is not
--         granted: it marks the lock ('\0w'), so that the release
--         publishes (release.lua); a release nobody waits for does not
-- Returns {1, token} when held by owner, {0, pttl} when held by another,
-- {0, ms} when a restarted server holds grants back (restart_wait).
local lock, owner, ttl, hold = KEYS[1], ARGV[1], tonumber(ARGV[2]), '\0h' .. ARGV[3]

-- pttl is -2 for a free lock: one read tells free, or how long it is held.
local pttl = redis.call('pttl', lock)
if pttl == -2 then
  local token, had
  if ARGV[4] == '1' then
    token, had = next_token(KEYS[2])
  else
    token, had = last_token(KEYS[2])
  end
  local wait = hold_back(KEYS[2], had, ttl)
  if wait > 0 then
    return {0, wait}
  end
  redis.call('hset', lock, owner, 1, '\0t', token, hold, 1)
  redis.call('pexpire', lock, ttl)
  return {1, token}
end

-- One read: the owner's count, this hold, the token and the mark.
local got = redis.call('hmget', lock, owner, hold, '\0t', '\0w')
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

if ARGV[5] == '1' and not got[4] then
  redis.call('hset', lock, '\0w', 1)
end
return {0, pttl}
