-- delete.lua: remove delivered (ACKed) messages from one user list.
--
-- KEYS[1] user list   msg/u:<uid>/p:<platform>/oms (zset)
-- ARGV[1] body/count key prefix "msg/om:" (keys are built here from the
--         seqs, which is why this script is standalone-Redis only, see
--         clean.lua)
-- ARGV[2..] seqs (decimal strings)
--
-- A seq's count is decremented only when this list really held it, so a
-- repeated ACK cannot steal another user's reference. The last reference
-- deletes body and count. Returns the number of members removed.
local removed = 0
for i = 2, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    removed = removed + 1
    local count = ARGV[1] .. ARGV[i] .. '/n'
    if redis.call('DECR', count) <= 0 then
      redis.call('DEL', ARGV[1] .. ARGV[i] .. '/m', count)
    end
  end
end
return removed
