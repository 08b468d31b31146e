-- Fair lock release: as release.lua, then wake only the first waiter.
-- KEYS[1] lock hash, KEYS[3] queue, KEYS[4] queue timeouts
-- ARGV[1] owner, ARGV[2] hold id, ARGV[3] token ('' matches any),
-- ARGV[4] waiter channel prefix, ARGV[5] publish command
local left = drop_hold(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if left == 0 then
  local head = redis.call('lindex', KEYS[3], 0)
  if head then
    redis.call(ARGV[5], waiter_channel(ARGV[4], head), 'free')
  end
end
return left
