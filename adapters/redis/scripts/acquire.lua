-- Take, re-enter or report a lock.
-- KEYS[1] lock hash: field <owner> = hold count, '\0t' = token,
--         '\0h'..<hold id> = 1 for each hold (Locker) of the owner
-- KEYS[2] fencing counter
-- ARGV[1] owner, ARGV[2] ttl (ms), ARGV[3] hold id,
-- ARGV[4] '1' to draw the token from the counter here; '0' for Redlock,
--         which sets the token afterwards (see fence.lua)
-- Returns {1, token} when held by owner, {0, pttl} when held by another,
-- {0, ms} when a restarted server holds grants back (restart_wait).
local lock, owner, ttl, hold = KEYS[1], ARGV[1], tonumber(ARGV[2]), '\0h' .. ARGV[3]

-- pttl is -2 for a free lock: one read tells free, or how long it is held.
local pttl = redis.call('pttl', lock)
if pttl == -2 then
  local wait = restart_wait(KEYS[2], ttl)
  if wait > 0 then
    return {0, wait}
  end
  local token = 0
  if ARGV[4] == '1' then
    token = next_token(KEYS[2])
  else
    token = last_token(KEYS[2])
  end
  redis.call('hset', lock, owner, 1, '\0t', token, hold, 1)
  redis.call('pexpire', lock, ttl)
  return {1, token}
end

if redis.call('hexists', lock, owner) == 1 then
  -- A retried acquire of the same hold must not count it twice.
  if redis.call('hexists', lock, hold) == 0 then
    redis.call('hincrby', lock, owner, 1)
    redis.call('hset', lock, hold, 1)
  end
  if pttl < ttl then
    redis.call('pexpire', lock, ttl)
  end
  return {1, tonumber(redis.call('hget', lock, '\0t'))}
end

return {0, pttl}
