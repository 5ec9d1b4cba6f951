-- Records one session unless the user is at a cap and, when asked, chooses
-- the sessions of its platform that must go, in one atomic step, so that
-- concurrent connects can neither exceed a cap nor both survive.
-- KEYS[1]: the user's session hash (rkeys.Sessions: msg/u:<uid>/ss, or
-- msg/{u:<uid>}/ss on a cluster)
-- KEYS[2]: the boat's index msg/b:<boat>/ss, only on a standalone server: on
-- a cluster it is in another slot, and session.Store.Add adds the member
-- itself, before this script runs.
-- ARGV: sid, "<platform>-<boat>", "<uid> <sid>", max sessions of the uid
-- (0: none), max sessions of the uid on the platform (0: none), "<platform>-",
-- "1" to keep only the newest session of the platform ("0": keep all).
-- Returns the losers as a flat list sid, value, sid, value…: with ARGV[7]
-- "1", every session of the platform except the newest (the new one among
-- them when a newer one is recorded); nothing otherwise. Losers stay
-- recorded: the kickout of each removes it once its boat has ended it.
-- A cap reached returns the error "LIMIT <uid|platform> <count>" and writes
-- nothing. A sid already recorded is written again whatever the caps.
local maxUID = tonumber(ARGV[4])
local maxPlatform = tonumber(ARGV[5])
local prefix = ARGV[6]
local function onPlatform(v)
  return string.sub(v, 1, #prefix) == prefix
end
if (maxUID > 0 or maxPlatform > 0) and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  local all = redis.call('HGETALL', KEYS[1])
  local n = #all / 2
  if maxUID > 0 and n >= maxUID then
    return redis.error_reply('LIMIT uid ' .. n)
  end
  if maxPlatform > 0 then
    local p = 0
    for i = 2, #all, 2 do
      if onPlatform(all[i]) then
        p = p + 1
      end
    end
    if p >= maxPlatform then
      return redis.error_reply('LIMIT platform ' .. p)
    end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if #KEYS > 1 then
  redis.call('SADD', KEYS[2], ARGV[3])
end
if ARGV[7] ~= '1' then
  return {}
end
-- Sids are decimal time-sortable ids (session.Less): a shorter one is
-- older, equal lengths compare as strings (digits collate in order).
local function older(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end
local all = redis.call('HGETALL', KEYS[1])
local newest = ARGV[1]
for i = 1, #all, 2 do
  if onPlatform(all[i + 1]) and older(newest, all[i]) then
    newest = all[i]
  end
end
local losers = {}
for i = 1, #all, 2 do
  if onPlatform(all[i + 1]) and all[i] ~= newest then
    losers[#losers + 1] = all[i]
    losers[#losers + 1] = all[i + 1]
  end
end
return losers
