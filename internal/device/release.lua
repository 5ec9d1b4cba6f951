-- release.lua: remove a token from the device hash of a user who no longer
-- owns it, unless that user's entry was written under a later claim.
--
-- KEYS[1] device hash of the earlier owner
-- ARGV[1] field "<platform>/<provider>/<token>"
-- ARGV[2] gen of the claim that took the token (decimal)
--
-- An entry without a gen (written before owners were kept) counts as the
-- oldest. Returns 1 when the entry was removed.
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then
  return 0
end
local gen = 0
local ok, v = pcall(cjson.decode, raw)
if ok and type(v) == 'table' and type(v.gen) == 'number' then
  gen = v.gen
end
if gen >= tonumber(ARGV[2]) then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
