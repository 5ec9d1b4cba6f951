-- clean.lua: drop expired members of one user list and trim it to a maximum
-- length. Runs after a batch of writes, and alone (max 0) once a read loop
-- comes back empty.
--
-- KEYS[1] user list   msg/u:<uid>/p:<platform>/oms (zset)
-- ARGV[1] exclusive upper score bound of expired members: "(" .. now-expiry (unix ms)
-- ARGV[2] maximum list length; 0 or less: unlimited
-- ARGV[3] last rank to trim: -(max+1), so ranks 0..-(max+1) are the oldest
-- ARGV[4] body/count key prefix "msg/om:"
--
-- Body and count keys are built here from the trimmed seqs, which are only
-- known inside the script: keys not declared in KEYS, so this script (like
-- read.lua and delete.lua) works on a standalone Redis but not on Redis
-- Cluster.
--
-- Returns the number of members trimmed by the maximum length.

-- Expired members are removed by score WITHOUT touching their reference
-- counts, as seed 000 does: their body and count carry an expire-at no later
-- than the member's own expiry and vanish by themselves.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])

local max = tonumber(ARGV[2])
if max <= 0 or redis.call('ZCARD', KEYS[1]) <= max then
  return 0
end

-- Members trimmed for length are unexpired and may still wait in other users'
-- lists, so their counts are corrected: the last reference deletes body and
-- count.
local trimmed = redis.call('ZRANGE', KEYS[1], 0, ARGV[3])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, ARGV[3])
for _, seq in ipairs(trimmed) do
  local count = ARGV[4] .. seq .. '/n'
  if redis.call('DECR', count) <= 0 then
    redis.call('DEL', ARGV[4] .. seq .. '/m', count)
  end
end
return #trimmed
