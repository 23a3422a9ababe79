-- renew: extend a live slot held under the token; never revive an expired one.
-- KEYS[1] group
-- ARGV[1] token, ARGV[2] lease_ms
-- Reply: {1, expires_ms, now_ms}   renewed
--        {0}                       not held
local group, token = KEYS[1], ARGV[1]
local expires, rest = live_slot(group, token)
if not expires then
  return {0}
end
local renewed = now + tonumber(ARGV[2])
redis.call('HSET', group, token, with_expiry(renewed, rest))
return {1, renewed, now}
