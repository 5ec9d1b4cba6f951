-- Completes or releases a reservation, only if it is still the caller's.
-- KEYS[1]: msg/push/idem:<key>
-- ARGV: the reservation "p:<fingerprint>:<token>"; the done value
-- "d:<fingerprint>:<seqs>" and the window in milliseconds, or "" to release.
-- Returns 1 when the reservation was the caller's, else 0.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
end
return 1
