-- read.lua: one page of unexpired messages of one user list, oldest first.
--
-- KEYS[1] user list   msg/u:<uid>/p:<platform>/oms (zset)
-- ARGV[1] inclusive lower score bound: now-expiry (unix ms)
-- ARGV[2] page size
-- ARGV[3] body key prefix "msg/om:" (body keys are built here from the seqs,
--         which is why this script is standalone-Redis only, see clean.lua)
--
-- Returns a flat array of triples: seq, score, body. A body that no longer
-- exists comes back as nil; the Go side drops such a member (see Store.Read).
-- Seqs and scores are passed through as the strings Redis produced.
local page = redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[1], '+inf', 'WITHSCORES', 'LIMIT', 0, ARGV[2])
if #page == 0 then
  return {}
end
local keys = {}
for i = 1, #page, 2 do
  keys[#keys + 1] = ARGV[3] .. page[i] .. '/m'
end
local bodies = redis.call('MGET', unpack(keys))
local out = {}
for i = 1, #keys do
  out[#out + 1] = page[2 * i - 1]
  out[#out + 1] = page[2 * i]
  out[#out + 1] = bodies[i]
end
return out
