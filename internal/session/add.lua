-- Records one session unless the user is at a cap and, when asked, chooses
-- the sessions of its platform that must go, in one atomic step, so that
-- concurrent connects can neither exceed a cap nor both survive.
-- KEYS[1]: the user's session hash (rkeys.Sessions: msg/u:<uid>/ss, or
-- msg/{u:<uid>}/ss on a cluster)
-- KEYS[2]: the user's connect order (rkeys.SessionOrder, in the slot of
-- KEYS[1]): field sid → the how-manieth connect of the user recorded it,
-- field "#" → the last number given.
-- KEYS[3]: the boat's index msg/b:<boat>/ss, only on a standalone server: on
-- a cluster it is in another slot, and session.Store.Add adds the member
-- itself, before this script runs.
-- ARGV: sid, "<platform>-<boat>", "<uid> <sid>", max sessions of the uid
-- (0: none), max sessions of the uid on the platform (0: none), "<platform>-",
-- "1" to keep only the newest session of the platform ("0": keep all),
-- seconds the connect order is kept after the user's last connect.
-- Returns the losers as a flat list sid, value, sid, value…: with ARGV[7]
-- "1", every session of the platform except the newest (the new one among
-- them when a newer one is recorded); nothing otherwise.
-- Newest is the session whose connect this script recorded last, not the
-- largest sid: sids are minted from the clocks of different boats, and a
-- device that reconnects through a boat whose clock is behind must still
-- beat its own half-open old session. The order is a counter in KEYS[2],
-- given when a sid is first recorded (a sid recorded again keeps its
-- place). A session without a number (recorded while the order was not
-- kept, or by a boat restoring its sessions) is older than every numbered
-- one; between two of them the larger sid is the newer. Losers stay
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
if #KEYS > 2 then
  redis.call('SADD', KEYS[3], ARGV[3])
end
if ARGV[7] ~= '1' then
  return {}
end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  redis.call('HSET', KEYS[2], ARGV[1], redis.call('HINCRBY', KEYS[2], '#', 1))
end
-- Ended sessions leave their numbers; they go here, while the user's
-- hash is at hand, and the whole order with the user's last connect.
redis.call('EXPIRE', KEYS[2], tonumber(ARGV[8]))
local all = redis.call('HGETALL', KEYS[1])
local recorded = {}
for i = 1, #all, 2 do
  recorded[all[i]] = true
end
local order = {}
local flat = redis.call('HGETALL', KEYS[2])
for i = 1, #flat, 2 do
  if flat[i] ~= '#' and not recorded[flat[i]] then
    redis.call('HDEL', KEYS[2], flat[i])
  else
    order[flat[i]] = tonumber(flat[i + 1])
  end
end
-- Between sessions without a number, sids are decimal time-sortable ids
-- (session.Less): a shorter one is older, equal lengths compare as strings.
local function older(a, b)
  local oa, ob = order[a] or 0, order[b] or 0
  if oa ~= ob then
    return oa < ob
  end
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end
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
