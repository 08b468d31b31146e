-- How long, in ms, a restarted server still holds back a grant of a free
-- lock (restart_wait), without writing: for Inspect.
-- KEYS[1] fencing counter
-- ARGV[1] the hold-back window in ms ('' for ARGV[2]; see
--         hold_back_window), ARGV[2] the lease's TTL in ms
if ARGV[1] ~= '' then
  hold_back_window = tonumber(ARGV[1])
end
return restart_wait(KEYS[1], tonumber(ARGV[2]))
