-- A waiter gives up: leave the queue; if it was first and the lock is
-- free, wake the next one.
-- KEYS[1] lock hash, KEYS[3] queue, KEYS[4] queue timeouts
-- ARGV[1] waiter id (its channel id and owner, see fair_acquire.lua),
-- ARGV[2] waiter channel prefix, ARGV[3] publish command
local was = redis.call('lindex', KEYS[3], 0)
redis.call('lrem', KEYS[3], 0, ARGV[1])
redis.call('zrem', KEYS[4], ARGV[1])
if was == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
  local head = redis.call('lindex', KEYS[3], 0)
  if head then redis.call(ARGV[3], waiter_channel(ARGV[2], head), 'free') end
end
return 1
