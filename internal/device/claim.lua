-- claim.lua: make uid the owner of one device token, so that a token belongs
-- to one user at a time. The owner key is the single key of this script, so
-- it runs on Redis Cluster wherever the key's slot is.
--
-- KEYS[1] owner key   msg/dt:<platform>/<provider>/<token>
-- ARGV[1] uid
--
-- The value is "<gen> <uid>". gen grows with every claim of the token: it is
-- the larger of the previous gen + 1 and Redis' clock in microseconds, so it
-- keeps growing even after the key was deleted and claimed again. An entry in
-- a user's device hash carries the gen of the claim it was written under;
-- release.lua removes an earlier owner's entry only when its gen is older,
-- which keeps an entry the earlier owner wrote after claiming the token back.
--
-- Returns {previous value or "", gen}.
local prev = redis.call('GET', KEYS[1]) or ''
local t = redis.call('TIME')
local gen = tonumber(t[1]) * 1000000 + tonumber(t[2])
local sp = string.find(prev, ' ', 1, true)
if sp then
  local pg = tonumber(string.sub(prev, 1, sp - 1))
  if pg and pg >= gen then
    gen = pg + 1
  end
end
-- %.0f prints a whole number of up to 2^53 exactly.
local g = string.format('%.0f', gen)
redis.call('SET', KEYS[1], g .. ' ' .. ARGV[1])
return {prev, g}
