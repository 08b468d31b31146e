-- drop_hold, prepended to the release scripts: give up one hold of owner
-- on the lock hash (token '' matches any: the hold id alone is unique).
-- The owner's last hold deletes the lock. Safe to run twice: the hold's
-- field is gone after the first. Returns the owner's remaining holds, or
-- -1 when the hold was not held, and whether a waiter marked the lock
-- (acquire.lua's '\0w').
local function drop_hold(lock, owner, hold_id, token)
  local hold = '\0h' .. hold_id
  -- One read: the hold, the token, the owner's count and the mark. A key
  -- overwritten with another type (the read fails) holds no hold of ours.
  local got = redis.pcall('hmget', lock, hold, '\0t', owner, '\0w')
  if got.err or not got[1] or (token ~= '' and got[2] ~= token) then
    return -1, false
  end
  local left = tonumber(got[3] or '1') - 1
  if left > 0 then
    redis.call('hdel', lock, hold)
    redis.call('hset', lock, owner, left)
    return left, got[4] ~= false
  end
  redis.call('del', lock)
  return 0, got[4] ~= false
end
