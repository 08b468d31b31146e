-- drop_hold, prepended to the release scripts: give up one hold of owner
-- on the lock hash (token '' matches any: the hold id alone is unique).
-- The owner's last hold deletes the lock. Safe to run twice: the hold's
-- field is gone after the first. Returns the owner's remaining holds, or
-- -1 when the hold was not held.
local function drop_hold(lock, owner, hold_id, token)
  local hold = '\0h' .. hold_id
  -- One read: the hold, the token and the owner's count. A key
  -- overwritten with another type (the read fails) holds no hold of ours.
  local got = redis.pcall('hmget', lock, hold, '\0t', owner)
  if got.err or not got[1] or (token ~= '' and got[2] ~= token) then
    return -1
  end
  local left = tonumber(got[3] or '1') - 1
  if left > 0 then
    redis.call('hdel', lock, hold)
    redis.call('hset', lock, owner, left)
    return left
  end
  redis.call('del', lock)
  return 0
end
