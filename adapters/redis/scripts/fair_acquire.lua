-- Fair (FIFO) lock: take, re-enter, or queue.
-- KEYS[1] lock hash (as acquire.lua), KEYS[2] fencing counter,
-- KEYS[3] queue (list of waiter ids, oldest first),
-- KEYS[4] queue timeouts (zset waiter id -> server-time ms it expires)
-- ARGV[1] owner, ARGV[2] ttl ms, ARGV[3] hold id,
-- ARGV[4] '1' when the caller waits (joins the queue), '0' for a try,
-- ARGV[5] ms a waiter stays queued without retrying, ARGV[6] waiter
-- channel prefix, ARGV[7] publish command ('publish' or 'spublish'),
-- ARGV[8] the waiter's channel id (16 characters).
-- A waiter id is its channel id followed by the owner; the waiter's
-- channel is the prefix followed by the channel id (see waiter_channel).
-- Returns {1, token} when held, {0, ms to wait at most} (also while a
-- restarted server holds grants back: restart_wait).
local lock, queue, timeouts = KEYS[1], KEYS[3], KEYS[4]
local owner, ttl, hold = ARGV[1], tonumber(ARGV[2]), '\0h' .. ARGV[3]
local me = ARGV[8] .. owner
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Waiters that stopped retrying (died, or gave up unheard) leave.
local head = redis.call('lindex', queue, 0)
while head do
  local expires = tonumber(redis.call('zscore', timeouts, head))
  if expires and expires > now then break end
  redis.call('lpop', queue)
  redis.call('zrem', timeouts, head)
  head = redis.call('lindex', queue, 0)
end

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
if free then
  held_back = restart_wait(KEYS[2], ttl)
end
if free and held_back == 0 and (not head or head == me) then
  if head then
    redis.call('lpop', queue)
    redis.call('zrem', timeouts, me)
  end
  local token = next_token(KEYS[2])
  redis.call('hset', lock, owner, 1, '\0t', token, hold, 1)
  redis.call('pexpire', lock, ttl)
  return {1, token}
end

if free and held_back == 0 and head then
  -- Free, but another waiter is first: make sure it knows.
  redis.call(ARGV[7], waiter_channel(ARGV[6], head), 'free')
end
local wait = tonumber(ARGV[5])
if ARGV[4] == '1' then
  -- ZADD answers 1 for a waiter new to the queue.
  if redis.call('zadd', timeouts, now + wait, me) == 1 then
    redis.call('rpush', queue, me)
  end
end
if held_back > 0 then pttl = held_back end
if pttl < 0 or pttl > wait / 2 then pttl = math.floor(wait / 2) end
return {0, pttl}
