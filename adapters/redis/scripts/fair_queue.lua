-- The fair lock's queue, prepended to its scripts (after token.lua and
-- drop_hold.lua). KEYS[1] lock hash, KEYS[2] fencing counter, KEYS[3]
-- queue (list of waiter ids, oldest first), KEYS[4] queue timeouts (zset
-- waiter id -> server-time ms it expires), KEYS[5] waiters' last
-- attempts (hash waiter id -> '<attempt> <ttl ms> <queue timeout ms>').
--
-- A waiter id is the waiter's channel id (16 characters, one per Locker)
-- followed by its owner. A Locker's goroutines queue in the process
-- first, so a Locker has at most one waiter per name in the server's
-- queue, and its channel stays subscribed from one Lock to the next.
local lock, fence, queue, timeouts, waiters = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

-- waiter_channel is the channel that wakes the waiter with id.
local function waiter_channel(prefix, id)
  return prefix .. string.sub(id, 1, 16)
end

-- now_ms is the server's clock in milliseconds.
local function now_ms()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- forget takes id out of the queue's bookkeeping (not the list itself).
local function forget(id)
  redis.call('zrem', timeouts, id)
  redis.call('hdel', waiters, id)
end

-- live_head drops the waiters at the head of the queue that stopped
-- retrying (died, or gave up unheard), and returns the first one left
-- and when its entry expires, or nil.
local function live_head(now)
  local head = redis.call('lindex', queue, 0)
  while head do
    local expires = tonumber(redis.call('zscore', timeouts, head))
    if expires and expires > now then return head, expires end
    redis.call('lpop', queue)
    forget(head)
    head = redis.call('lindex', queue, 0)
  end
  return nil
end

-- hand_on passes the free lock to the first live waiter: it grants it at
-- once, and publishes the grant on the waiter's channel as
-- 'g <attempt> <token> <term ms> <owner>', so the waiter holds it without
-- a request more. <attempt> is the waiter's last attempt this server
-- saw, which the waiter sent before the grant: its lease counts from
-- that attempt's send time for <term>, the shorter of its TTL and its
-- queue timeout, so a waiter that died while queued holds the lock no
-- longer than its place in the queue would have blocked it. A waiter
-- that cannot be granted so (its entry has no attempt: an earlier
-- version's; or a restarted server holds grants back) is only woken,
-- with 'free', and takes the lock with its own attempt.
local function hand_on(now, prefix, publish)
  local head = live_head(now)
  if not head then return end
  local last = redis.call('hget', waiters, head)
  local attempt, ttl, queue_timeout
  if last then
    attempt, ttl, queue_timeout = string.match(last, '^(%d+) (%d+) (%d+)$')
  end
  local token, had
  if attempt then
    token, had = next_token(fence)
  end
  if not attempt or hold_back(fence, had, tonumber(ttl)) > 0 then
    redis.call(publish, waiter_channel(prefix, head), 'free')
    return
  end
  redis.call('lpop', queue)
  forget(head)
  local owner = string.sub(head, 17)
  local term = math.min(tonumber(ttl), tonumber(queue_timeout))
  redis.call('hset', lock, owner, 1, '\0t', token, '\0h' .. owner, 1)
  redis.call('pexpire', lock, term)
  redis.call(publish, waiter_channel(prefix, head),
    string.format('g %s %.0f %d %s', attempt, token, term, owner))
end
