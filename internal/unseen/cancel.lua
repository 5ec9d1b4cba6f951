-- cancel removes the entries indexed under ARGV ("<uid> <seq>" each): one
-- of their messages was ACKed. Returns id, value, … of those removed.
local out = {}
for _, f in ipairs(ARGV) do
  local id = redis.call('HGET', KEYS[3], f)
  if id then
    local v = drop(id)
    if v then
      out[#out + 1] = id
      out[#out + 1] = v
    end
  end
end
return out
