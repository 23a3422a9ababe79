-- preference: the holder an operator prefers for a group, and its time left.
-- KEYS[1] preferred holder
-- ARGV: none
-- Reply: {}                     no preference (or a value this store did not write)
--        {holder, expires_in_ms}
local holder, left = preferred_holder(KEYS[1])
if not holder then
  return {}
end
return {holder, left}
