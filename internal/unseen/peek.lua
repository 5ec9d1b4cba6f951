-- peek returns id, value, … of the entries indexed under ARGV ("<uid>
-- <seq>" each), each once, changing nothing.
local out = {}
local seen = {}
for _, f in ipairs(ARGV) do
  local id = redis.call('HGET', KEYS[3], f)
  if id and not seen[id] then
    seen[id] = true
    local v = redis.call('HGET', KEYS[2], id)
    if v then
      out[#out + 1] = id
      out[#out + 1] = v
    end
  end
end
return out
