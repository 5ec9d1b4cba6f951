-- Reserves an idempotency key unless it is taken, atomically.
-- KEYS[1]: msg/push/idem:<key>
-- ARGV: "p:<fingerprint>:<token>", pending TTL in milliseconds.
-- Returns false when the key was free (and is now reserved), else its value:
-- "p:<fingerprint>:<token>" (in flight) or "d:<fingerprint>:<seq,seq,…>".
local v = redis.call('GET', KEYS[1])
if v then
  return v
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
