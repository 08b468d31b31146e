-- The fair lock's waiter ids, prepended to its scripts. A waiter id is
-- the waiter's channel id (16 characters, one per Locker) followed by its
-- owner. A Locker's goroutines queue in the process first, so a Locker
-- has at most one waiter per name in the server's queue, and its channel
-- stays subscribed from one Lock to the next.

-- waiter_channel is the channel that wakes the waiter with id.
local function waiter_channel(prefix, id)
  return prefix .. string.sub(id, 1, 16)
end
