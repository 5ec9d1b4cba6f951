-- schedule adds entry ARGV[1] ("<uid> <first seq>") with value ARGV[3]
-- ("<seq>,<seq>,…|<notifications>"), due at ARGV[2] (Unix ms), and indexes
-- it under "<uid> <seq>" for each of its seqs. An entry already there is
-- kept as it is (a task handled again, its entry maybe claimed): 0.
if redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[3]) == 0 then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
local uid = string.match(ARGV[1], '^(.*) ')
local sep = string.find(ARGV[3], '|', 1, true)
for seq in string.gmatch(string.sub(ARGV[3], 1, sep - 1), '[^,]+') do
  redis.call('HSET', KEYS[3], uid .. ' ' .. seq, ARGV[1])
end
return 1
