-- A waiter of the plain lock stops waiting, or its process was woken for
-- it when none of its waiters was left: a wake-up that a release may have
-- sent it (with the lock kept for it) passes on to the next waiter while
-- the lock is free. A waiter that stops waiting also leaves the waiters;
-- a pass-on leaves the entry alone, as the release took it already and
-- the Locker's next attempt may have put it back. While the lock is held
-- and others wait, the lock is marked, so that its release wakes them
-- (acquire.lua).
-- KEYS[1] lock hash, KEYS[2] waiters; ARGV[1] waiter id, ARGV[2]
-- channel, ARGV[3] publish command, ARGV[4] ms the lock is kept for the
-- next waiter woken, ARGV[5] '1' to leave the waiters
local lock = KEYS[1]
if ARGV[5] == '1' then
  redis.call('zrem', KEYS[2], ARGV[1])
end
local held = redis.call('exists', lock) == 1
-- A key overwritten with another type is no lock of ours (pcall).
if held and redis.pcall('hget', lock, '\0r') == ARGV[1] then
  redis.call('del', lock)
  held = false
end
if not held then
  wake_next(KEYS[2], ARGV[3], ARGV[2], nil, lock, ARGV[4])
elseif redis.call('zcard', KEYS[2]) > 0 then
  redis.pcall('hset', lock, '\0w', 1)
end
return 1
