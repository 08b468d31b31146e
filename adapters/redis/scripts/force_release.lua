-- Take the lock from its holder (ForceRelease), after lock_waiters.lua:
-- delete the lock's hash if ARGV[1] still holds it, and wake the next
-- waiter as a release does (the fence counter stays, so the next grant's
-- token is larger than the evicted holder's).
-- KEYS[1] lock hash, KEYS[2] waiters; ARGV[1] the holder read, ARGV[2]
-- channel, ARGV[3] publish command ('' not to wake anyone), ARGV[4] ms
-- the lock is kept for the waiter woken (see wake_next)
-- Returns 1 when it took the lock, 0 when ARGV[1] no longer held it.
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('del', KEYS[1])
if ARGV[3] ~= '' then
  wake_next(KEYS[2], ARGV[3], ARGV[2], ARGV[1], KEYS[1], ARGV[4])
end
return 1
