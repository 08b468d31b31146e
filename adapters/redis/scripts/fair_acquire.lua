-- Fair (FIFO) lock: take, re-enter, or queue (keys: see fair_queue.lua).
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] hold id,
-- ARGV[4] '1' when the caller waits (joins the queue), '0' for a try,
-- ARGV[5] ms a waiter stays queued without retrying, ARGV[6] waiter
-- channel prefix, ARGV[7] publish command ('publish' or 'spublish'),
-- ARGV[8] the waiter's channel id (16 characters), ARGV[9] the number of
-- this attempt among the waiter's (see hand_on).
-- Returns {1, token} when held (also when a release granted it to the
-- caller already), {0, ms to wait at most}, or held_back_reply's while
-- a restarted server holds grants back (restart_wait).
local owner, ttl, hold = ARGV[1], tonumber(ARGV[2]), '\0h' .. ARGV[3]
local queue_timeout = tonumber(ARGV[5])
local me = ARGV[8] .. owner
local now = now_ms()
local head = live_head(now)

if redis.call('hexists', lock, owner) == 1 then
  if redis.call('hexists', lock, hold) == 0 then
    redis.call('hincrby', lock, owner, 1)
    redis.call('hset', lock, hold, 1)
  end
  if redis.call('pttl', lock) < ttl then redis.call('pexpire', lock, ttl) end
  return {1, tonumber(redis.call('hget', lock, '\0t'))}
end

local pttl = redis.call('pttl', lock)
local free = pttl == -2
local held_back = 0
if free and (not head or head == me) then
  local token, had = next_token(fence)
  held_back = hold_back(fence, had, ttl)
  if held_back == 0 then
    if head then
      redis.call('lpop', queue)
      forget(me)
    end
    redis.call('hset', lock, owner, 1, '\0t', token, hold, 1)
    redis.call('pexpire', lock, ttl)
    return {1, token}
  end
elseif free then
  held_back = restart_wait(fence, ttl)
end

if ARGV[4] == '1' then
  -- ZADD answers 1 for a waiter new to the queue.
  if redis.call('zadd', timeouts, now + queue_timeout, me) == 1 then
    redis.call('rpush', queue, me)
  end
  redis.call('hset', waiters, me, ARGV[9] .. ' ' .. ARGV[2] .. ' ' .. ARGV[5])
end
if free and held_back == 0 then
  -- Free, but another waiter is first: pass it on.
  hand_on(now, ARGV[6], ARGV[7])
  pttl = redis.call('pttl', lock)
end
if held_back > 0 then pttl = held_back end
if pttl < 0 or pttl > queue_timeout / 2 then pttl = math.floor(queue_timeout / 2) end
if held_back > 0 then
  return held_back_reply(pttl, held_back)
end
return {0, pttl}
