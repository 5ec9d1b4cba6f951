-- done removes the entries ARGV (ids) once their notifications are
-- published. Returns how many were still there.
local n = 0
for _, id in ipairs(ARGV) do
  if drop(id) then
    n = n + 1
  end
end
return n
