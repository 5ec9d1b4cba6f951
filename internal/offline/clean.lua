-- clean.lua: drop expired members of one user list and say which members
-- the list must give up to stay within its maximum length. Runs after a
-- batch of writes, and alone (max 0) once a read loop comes back empty.
--
-- KEYS[1] user list (zset)
-- ARGV[1] exclusive upper score bound of expired members: "(" .. now-expiry (unix ms)
-- ARGV[2] maximum list length; 0 or less: unlimited
-- ARGV[3] last rank over the maximum: -(max+1), so ranks 0..-(max+1) are the oldest
--
-- Returns two lists of seqs: those it dropped as expired, and those over
-- the maximum, oldest first, still in the list. The script cannot remove the
-- latter itself: their counts must be decremented, and body and count keys
-- are only declared once the seqs are known, so Go runs delete.lua on them
-- (see Store.Write).

-- Expired members are removed by score WITHOUT touching their reference
-- counts: their body and count carry an expire-at no later
-- than the member's own expiry and vanish by themselves.
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
end

local max = tonumber(ARGV[2])
if max <= 0 or redis.call('ZCARD', KEYS[1]) <= max then
  return {expired, {}}
end
return {expired, redis.call('ZRANGE', KEYS[1], 0, ARGV[3])}
