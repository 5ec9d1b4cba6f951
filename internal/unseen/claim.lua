-- claim takes up to ARGV[3] entries due at ARGV[1] (Unix ms) and moves
-- each one's due time to ARGV[2], the end of the claimer's lease: an entry
-- its claimer does not remove in time (it crashed before publishing) is
-- due again then, for any poller. Returns id, value, id, value, ….
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  local v = redis.call('HGET', KEYS[2], id)
  if v then
    redis.call('ZADD', KEYS[1], 'XX', ARGV[2], id)
    out[#out + 1] = id
    out[#out + 1] = v
  else
    redis.call('ZREM', KEYS[1], id)
  end
end
return out
