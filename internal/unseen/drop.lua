-- drop removes entry id from the shard (KEYS[1] the due zset, KEYS[2] the
-- payload hash, KEYS[3] the index hash) with every index field of it, and
-- returns its value, false when there was none. A value is
-- "<seq>,<seq>,…|<notifications>", an id "<uid> <first seq>": the index
-- fields are "<uid> <seq>" for each seq of the value. A corrupt entry (no
-- '|', no uid) is dropped too, with the one index field its id names: a
-- drop that failed on it would leave it to be claimed again at every lease.
local function drop(id)
  redis.call('ZREM', KEYS[1], id)
  local v = redis.call('HGET', KEYS[2], id)
  if not v then
    return false
  end
  redis.call('HDEL', KEYS[2], id)
  local uid = string.match(id, '^(.*) ')
  local sep = string.find(v, '|', 1, true)
  if not uid or not sep then
    redis.call('HDEL', KEYS[3], id)
    return v
  end
  for seq in string.gmatch(string.sub(v, 1, sep - 1), '[^,]+') do
    redis.call('HDEL', KEYS[3], uid .. ' ' .. seq)
  end
  return v
end
