-- preference: the holder an operator prefers for a group, and its time left.
-- KEYS[1] preferred holder
-- ARGV: none
-- Reply: {}                     no preference (or another's value at the key)
--        {holder, expires_in_ms}
local holder = preferred_holder(KEYS[1])
if not holder then
  return {}
end
return {holder, redis.call('PTTL', KEYS[1])}
