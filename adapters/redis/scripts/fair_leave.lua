-- A waiter gives up: it leaves the queue, and gives back the lock if a
-- release had granted it meanwhile (hand_on); a lock that the waiter
-- leaves free passes to the next waiter (keys: see fair_queue.lua).
-- ARGV[1] waiter id (its channel id and owner), ARGV[2] waiter channel
-- prefix, ARGV[3] publish command
local me = ARGV[1]
local owner = string.sub(me, 17)
local was = redis.call('lindex', queue, 0)
redis.call('lrem', queue, 0, me)
forget(me)
local granted = drop_hold(lock, owner, owner, '') == 0
if granted or (was == me and redis.call('exists', lock) == 0) then
  hand_on(now_ms(), ARGV[2], ARGV[3])
end
return 1
