-- disown.lua: end uid's ownership of a device token, unless another claim
-- came since.
--
-- KEYS[1] owner key   msg/dt:<platform>/<provider>/<token>
-- ARGV[1] uid
-- ARGV[2] gen of uid's claim (decimal), or "" for any claim of uid
-- ARGV[3] the value to put back, or "" to delete the key
--
-- Returns 1 when the key was changed, 0 when it is not uid's (that claim's).
local cur = redis.call('GET', KEYS[1])
if not cur then
  return 0
end
local sp = string.find(cur, ' ', 1, true)
if not sp or string.sub(cur, sp + 1) ~= ARGV[1] then
  return 0
end
if ARGV[2] ~= '' and string.sub(cur, 1, sp - 1) ~= ARGV[2] then
  return 0
end
if ARGV[3] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[3])
end
return 1
