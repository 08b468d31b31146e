-- The plain lock's waiters, prepended to its release and leave scripts:
-- a zset of waiter ids (one per Locker, 16 characters) scored by when
-- each entry expires (server time, ms). A waiter's attempt that finds
-- the lock held adds or refreshes its entry (acquire.lua); a release
-- wakes one waiter, not all: the one whose entry was refreshed longest
-- ago, and so on.

-- next_waiter pops the live waiter least recently refreshed from the
-- waiters at key, dropping the expired ones before it (their Lockers
-- died, or stopped waiting unheard), and returns it, or nil.
local function next_waiter(key)
  local t = redis.call('time')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    local got = redis.call('zpopmin', key)
    if #got == 0 then
      return nil
    end
    if tonumber(got[2]) > now then
      return got[1]
    end
  end
end

-- wake_next wakes the next waiter on channel with '\0n' and its id, a
-- message its process routes to that waiter alone (waiters of earlier
-- versions wake on any message), and keeps the free lock for it for
-- window ms: the lock's hash holds only '\0r' = its id, so an attempt
-- of anyone else meanwhile finds the lock held and waits its turn,
-- where it would take the lock ahead of the waiter it was freed for
-- (acquire.lua). A waiter that does not come loses it at the window's
-- end. With no live waiter left, the message is the releaser's owner,
-- which wakes every waiter.
local function wake_next(key, publish, channel, owner, lock, window)
  local id = next_waiter(key)
  if id then
    redis.call('hset', lock, '\0r', id)
    redis.call('pexpire', lock, window)
    redis.call(publish, channel, '\0n' .. id)
  elseif owner then
    redis.call(publish, channel, owner)
  end
end
