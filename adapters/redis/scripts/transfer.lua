-- Hand a lock from one hold straight to a new owner, with a new token:
-- the next call chain of the same Locker (driver.Transferer), without a
-- release, a publish and an acquire.
-- KEYS[1] lock hash, KEYS[2] fencing counter
-- ARGV[1] owner, ARGV[2] hold id, ARGV[3] token of the hold,
-- ARGV[4] new owner (also its hold id), ARGV[5] ttl (ms),
-- ARGV[6] the new hold's payload ('' for none)
-- Returns the new token, or 0 when nothing changed: the hold is gone, or
-- its owner holds the lock more than once.
local lock, hold = KEYS[1], '\0h' .. ARGV[2]
local got = redis.pcall('hmget', lock, hold, '\0t', ARGV[1], '\0w')
if got.err or not got[1] or got[2] ~= ARGV[3] or got[3] ~= '1' then
  return 0
end
local token = next_token(KEYS[2])
redis.call('del', lock)
local t = redis.call('time')
redis.call('hset', lock, ARGV[4], 1, '\0t', token, '\0h' .. ARGV[4], 1,
  '\0a', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if got[4] then -- waiters of other Lockers still wait for the release
  redis.call('hset', lock, '\0w', 1)
end
if ARGV[6] ~= '' then
  redis.call('hset', lock, '\0p', ARGV[6])
end
redis.call('pexpire', lock, tonumber(ARGV[5]))
return token
