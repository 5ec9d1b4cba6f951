-- delete.lua: remove messages from one user list, after the client ACKed
-- them, after Read found their body gone, or to trim the list to its
-- maximum length.
--
-- KEYS[1]    user list (zset)
-- KEYS[2i]   body of ARGV[i]
-- KEYS[2i+1] ref count of ARGV[i]
-- ARGV[i]    seqs (decimal strings), i = 1..n
--
-- A seq's count is decremented only when this list really held it, so a
-- repeated ACK, or a trim racing an ACK of the same seq, cannot steal another
-- list's reference. The last reference deletes body and count. Returns the
-- seqs it removed (those the list held).
local removed = {}
for i = 1, #ARGV do
  if redis.call('ZREM', KEYS[1], ARGV[i]) == 1 then
    removed[#removed + 1] = ARGV[i]
    if redis.call('DECR', KEYS[2 * i + 1]) <= 0 then
      redis.call('DEL', KEYS[2 * i], KEYS[2 * i + 1])
    end
  end
end
return removed
