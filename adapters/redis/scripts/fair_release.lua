-- Fair lock release: as release.lua, then pass the lock to the first
-- waiter (hand_on; keys: see fair_queue.lua).
-- ARGV[1] owner, ARGV[2] hold id, ARGV[3] token ('' matches any),
-- ARGV[4] waiter channel prefix, ARGV[5] publish command
local left = drop_hold(lock, ARGV[1], ARGV[2], ARGV[3])
if left == 0 then
  hand_on(now_ms(), ARGV[4], ARGV[5])
end
return left
