-- Records one session unless the user is at a cap, atomically, so that
-- concurrent connects cannot exceed it.
-- KEYS[1]: msg/u:<uid>/ss (seed 000's hash)   KEYS[2]: msg/b:<boat>/ss
-- ARGV: sid, "<platform>-<boat>", "<uid> <sid>", max sessions of the uid
-- (0: none), max sessions of the uid on the platform (0: none), "<platform>-".
-- Returns the user's hash after the write (HGETALL), or the error
-- "LIMIT <uid|platform> <count>" and writes nothing. A sid already recorded
-- is written again whatever the caps.
local maxUID = tonumber(ARGV[4])
local maxPlatform = tonumber(ARGV[5])
if (maxUID > 0 or maxPlatform > 0) and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  local all = redis.call('HGETALL', KEYS[1])
  local n = #all / 2
  if maxUID > 0 and n >= maxUID then
    return redis.error_reply('LIMIT uid ' .. n)
  end
  if maxPlatform > 0 then
    local prefix = ARGV[6]
    local p = 0
    for i = 2, #all, 2 do
      if string.sub(all[i], 1, #prefix) == prefix then
        p = p + 1
      end
    end
    if p >= maxPlatform then
      return redis.error_reply('LIMIT platform ' .. p)
    end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return redis.call('HGETALL', KEYS[1])
