-- register.lua: record one device token of a user, keeping at most a cap of
-- tokens per user; all in one step, so concurrent registrations never leave
-- more than the cap.
--
-- KEYS[1] device hash   msg/u:<uid>/dv (msg/{u:<uid>}/dv on a cluster)
-- KEYS[2] session hash  msg/u:<uid>/ss of the same uid, in the same slot on a
--                       cluster (only for a registration by a session)
-- ARGV[1] field "<platform>/<provider>/<token>"
-- ARGV[2] app_id as a JSON string, or "" for none
-- ARGV[3] cap: most tokens the user keeps (decimal; 0: no cap)
-- ARGV[4] sid (with KEYS[2])
-- ARGV[5] the session's value "<platform>-<boat_id>" (with KEYS[2])
-- ARGV[6] gen of the claim that made the user the token's owner (claim.lua),
--         kept in the value so that release.lua never removes an entry
--         written under a later claim; "" for none
--
-- Returns {-1} and writes nothing when KEYS[2] is given and does not hold
-- ARGV[4] with value ARGV[5]. Otherwise {added, registered_at, evicted
-- fields...}: added is 1 for a new token, 0 for one registered again (it is
-- refreshed and evicts nothing, even when the user holds more than the cap
-- because the cap was lowered: the next new token trims them); registered_at (a decimal string, unix ms) is
-- Redis' clock, made later than every other token of the user so that the
-- registration order is the time order even within one millisecond; the
-- evicted fields are the oldest other tokens, removed so that at most the
-- cap remain. A value that is not JSON counts as the oldest.
if #KEYS > 1 and redis.call('HGET', KEYS[2], ARGV[4]) ~= ARGV[5] then
  return {-1}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cap = tonumber(ARGV[3])

local all = redis.call('HGETALL', KEYS[1])
local others = {}
local added = 1
for i = 1, #all, 2 do
  if all[i] == ARGV[1] then
    added = 0
  else
    local at = 0
    local ok, v = pcall(cjson.decode, all[i + 1])
    if ok and type(v) == 'table' and type(v.registered_at) == 'number' then
      at = v.registered_at
    end
    others[#others + 1] = {all[i], at}
    if at >= now then
      now = at + 1
    end
  end
end

-- %.0f prints a whole number of up to 2^53 exactly (Lua 5.1 would print
-- 1.7e+12 with tostring).
local at = string.format('%.0f', now)
local value = '"registered_at":' .. at
if ARGV[6] ~= '' then
  value = value .. ',"gen":' .. ARGV[6]
end
if ARGV[2] ~= '' then
  value = '"app_id":' .. ARGV[2] .. ',' .. value
end
value = '{' .. value .. '}'
redis.call('HSET', KEYS[1], ARGV[1], value)

local out = {added, at}
if added == 1 and cap > 0 and #others + 1 > cap then
  table.sort(others, function(a, b)
    if a[2] ~= b[2] then
      return a[2] < b[2]
    end
    return a[1] < b[1]
  end)
  for i = 1, #others + 1 - cap do
    redis.call('HDEL', KEYS[1], others[i][1])
    out[#out + 1] = others[i][1]
  end
end
return out
