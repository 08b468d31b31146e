-- Fair (FIFO) lock: take, re-enter, or queue.
-- KEYS[1] lock hash (as acquire.lua), KEYS[2] fencing counter,
-- KEYS[3] queue (list of waiter ids, oldest first),
-- KEYS[4] queue timeouts (zset waiter id -> server-time ms it expires)
-- ARGV[1] owner (the waiter id), ARGV[2] ttl ms, ARGV[3] hold id,
-- ARGV[4] '1' when the caller waits (joins the queue), '0' for a try,
-- ARGV[5] ms a waiter stays queued without retrying, ARGV[6] waiter
-- channel prefix (the head's channel is prefix .. id), ARGV[7] publish
-- command ('publish' or 'spublish')
-- Returns {1, token} when held, {0, ms to wait at most} (also while a
-- restarted server holds grants back: restart_wait).
local lock, queue, timeouts = KEYS[1], KEYS[3], KEYS[4]
local owner, ttl, hold = ARGV[1], tonumber(ARGV[2]), '\0h' .. ARGV[3]
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Waiters that stopped retrying (died, or gave up unheard) leave.
while true do
  local head = redis.call('lindex', queue, 0)
  if not head then break end
  local expires = tonumber(redis.call('zscore', timeouts, head))
  if expires and expires > now then break end
  redis.call('lpop', queue)
  redis.call('zrem', timeouts, head)
end

if redis.call('hexists', lock, owner) == 1 then
  if redis.call('hexists', lock, hold) == 0 then
    redis.call('hincrby', lock, owner, 1)
    redis.call('hset', lock, hold, 1)
  end
  if redis.call('pttl', lock) < ttl then redis.call('pexpire', lock, ttl) end
  return {1, tonumber(redis.call('hget', lock, '\0t'))}
end

local head = redis.call('lindex', queue, 0)
local free = redis.call('exists', lock) == 0
local held_back = 0
if free then
  held_back = restart_wait(KEYS[2], ttl)
end
if free and held_back == 0 and (not head or head == owner) then
  if head then
    redis.call('lpop', queue)
    redis.call('zrem', timeouts, owner)
  end
  local token = next_token(KEYS[2])
  redis.call('hset', lock, owner, 1, '\0t', token, hold, 1)
  redis.call('pexpire', lock, ttl)
  return {1, token}
end

if free and held_back == 0 and head then
  -- Free, but another waiter is first: make sure it knows.
  redis.call(ARGV[7], ARGV[6] .. head, 'free')
end
local wait = tonumber(ARGV[5])
if ARGV[4] == '1' then
  if not redis.call('zscore', timeouts, owner) then
    redis.call('rpush', queue, owner)
  end
  redis.call('zadd', timeouts, now + wait, owner)
end
local pttl = redis.call('pttl', lock)
if held_back > 0 then pttl = held_back end
if pttl < 0 or pttl > wait / 2 then pttl = math.floor(wait / 2) end
return {0, pttl}
