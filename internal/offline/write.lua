-- write.lua: store one offline message for one user on one platform.
--
-- KEYS[1] user list   msg/u:<uid>/p:<platform>/oms (zset)
-- KEYS[2] body        msg/om:<seq>/m
-- KEYS[3] ref count   msg/om:<seq>/n
--         (the standalone names; on a cluster all three carry {u:<uid>})
-- ARGV[1] score: send time, unix ms (decimal string)
-- ARGV[2] seq (decimal string, the zset member)
-- ARGV[3] body bytes
-- ARGV[4] expire-at of body and count: send time + expiry + margin, unix ms
-- ARGV[5] TTL of the user list: the expiry + margin, ms
--
-- Returns 1 when the seq was added to the list, 0 when it was there already
-- (a retried write is a no-op, so the count is never incremented twice).
-- Every number arrives as a string computed in Go and is passed on as is:
-- Lua 5.1 would print a computed 13-digit timestamp as 1.7e+12.
if redis.call('ZADD', KEYS[1], 'NX', ARGV[1], ARGV[2]) == 0 then
  return 0
end
if redis.call('INCR', KEYS[3]) == 1 then
  -- First reference: the body is new (or outlived its count only by accident).
  redis.call('SET', KEYS[2], ARGV[3], 'NX')
  redis.call('PEXPIREAT', KEYS[2], ARGV[4])
  redis.call('PEXPIREAT', KEYS[3], ARGV[4])
else
  -- Shared body: a platform with a longer expiry must not lose the body when
  -- the first writer's expiry passes, so only ever extend (GT).
  redis.call('PEXPIREAT', KEYS[2], ARGV[4], 'GT')
  redis.call('PEXPIREAT', KEYS[3], ARGV[4], 'GT')
end
-- Past this TTL every member of the list has expired anyway; it keeps lists of
-- users who never come back from staying forever.
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
