-- Fair lock hand-off, prepended to transfer.lua (keys: see
-- fair_queue.lua; arguments: see transfer.lua): the lock passes straight
-- to the next call chain of the same Locker only while no other waiter
-- is queued on the server. One that is gets the lock by the release,
-- first come, first served across processes.
if live_head(now_ms()) then
  return 0
end
